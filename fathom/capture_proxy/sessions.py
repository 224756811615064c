"""Capture sessions: one per rollout, keyed by the id that doubles as its API key.

A session holds its pinned policy, its sampling and budgets, and every call it made: captured
turns (valid or not), failed upstream calls and refused requests. Closed sessions stay readable
for `session_ttl_s`, then are evicted; open ones idle past `idle_session_ttl_s` are treated as
abandoned. Eviction runs as a side effect of traffic, so memory stays bounded without a timer.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from fathom.protocol import Budgets, SessionInfo


@dataclass(slots=True)
class CallRecord:
    """One request of a session: a captured turn, a failed upstream call or a refused request."""

    call_id: str
    index: int
    role: str
    depth: int
    parent: str | None
    status: str
    """`ok`, `invalid` (captured but failed validation), `failed` (upstream error) or `refused` (budget);
    `captured` only in the instant between answering the client and validating (never seen by readers)."""
    error: str | None = None
    turn: Any = None
    """The validated OpenEnv TrainingTurn (status ok)."""
    raw: dict[str, Any] | None = None
    """What was captured when validation failed, kept so the bad turn can be inspected."""
    metadata: dict[str, Any] = field(default_factory=dict)
    conversation: str | None = None
    """The root episode or nested sub-episode this call declares it continues (X-Fathom-Conversation)."""

    @property
    def chain(self) -> str | None:
        """The conversation the call is linked in: its declared one; a root call that declares none joins the
        session's default root conversation; a plain sub-call is in none."""
        return self.conversation or ("root" if self.role == "root" else None)

    def summary(self) -> dict[str, Any]:
        out = {
            "call_id": self.call_id, "index": self.index, "role": self.role, "depth": self.depth,
            "parent": self.parent, "conversation": self.conversation, "status": self.status, "error": self.error, "metadata": self.metadata,
        }
        if self.turn is not None:
            out["turn"] = self.turn.model_dump(mode="json")
        if self.raw is not None:
            out["raw"] = self.raw
        return out


@dataclass(slots=True)
class Session:
    session_id: str
    trainable: bool
    model: str
    policy_version: int
    sampling: dict[str, Any]
    budgets: Budgets
    metadata: dict[str, Any]
    created: float
    last_active: float
    closed_at: float | None = None
    calls: int = 0
    """Upstream calls started (captured, invalid or failed); refused requests are not calls."""
    refused: int = 0
    failed: int = 0
    invalid_turns: int = 0
    flag_reasons: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls_by_role: dict[str, int] = field(default_factory=dict)
    records: list[CallRecord] = field(default_factory=list)
    last_turn: dict[str, CallRecord] = field(default_factory=dict)
    """Each conversation's latest valid turn, which its next turn must extend."""
    pending: deque = field(default_factory=deque)
    """Answered calls whose capture runs just after the answer is sent (see calls.flush)."""

    @property
    def closed(self) -> bool:
        return self.closed_at is not None

    def budget_refusal(self, depth: int) -> str | None:
        """Why the next call would exceed a budget, or None. Called with no await before the call is counted."""
        b = self.budgets
        if b.max_depth is not None and depth > b.max_depth:
            return f"sub-call depth {depth} exceeds the session's max_depth budget {b.max_depth}"
        if b.max_calls is not None and self.calls >= b.max_calls:
            return f"the session used its max_calls budget ({b.max_calls} model calls)"
        total = self.prompt_tokens + self.completion_tokens
        if b.max_tokens is not None and total >= b.max_tokens:
            return f"the session used its max_tokens budget ({total} of {b.max_tokens} tokens)"
        return None

    def trace_records(self) -> list[CallRecord]:
        """Valid turns in training order: the root conversation(s), then each nested conversation, then plain calls.

        TRL chains a trace by comparing each turn only with the row it is building, so a conversation's turns
        must be adjacent or it forks a new row at every interleaved sub-call. `call_index` keeps arrival order.
        """
        first: dict[str, tuple[int, int]] = {}
        for r in self.records:
            if r.chain is not None and r.chain not in first:
                first[r.chain] = (0 if r.depth == 0 else 1, r.index)

        def key(r: CallRecord) -> tuple[int, int, int]:
            if r.chain is None:
                return (2, r.index, r.index)
            group, start = first[r.chain]
            return (group, start, r.index)

        return sorted((r for r in self.records if r.turn is not None), key=key)

    def next_call_id(self) -> str:
        # Not derived from the session id: the call id reaches the sandbox, the API key should not.
        return "call-" + secrets.token_hex(8)

    def info(self) -> SessionInfo:
        return SessionInfo(
            session_id=self.session_id,
            policy_version=self.policy_version,
            model=self.model,
            trainable=self.trainable,
            closed=self.closed,
            calls=self.calls,
            refused=self.refused,
            failed=self.failed,
            invalid_turns=self.invalid_turns,
            flagged=bool(self.flag_reasons),
            flag_reasons=list(self.flag_reasons),
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            total_tokens=self.prompt_tokens + self.completion_tokens,
            calls_by_role=dict(self.calls_by_role),
            metadata=self.metadata,
            sampling=dict(self.sampling),
        )


class SessionStore:
    """Sessions by id, with TTL eviction of closed and abandoned ones."""

    def __init__(self, *, closed_ttl_s: float, idle_ttl_s: float, clock=time.monotonic) -> None:
        self.closed_ttl_s = closed_ttl_s
        self.idle_ttl_s = idle_ttl_s
        self.clock = clock
        self.sessions: dict[str, Session] = {}
        self._closed: OrderedDict[str, float] = OrderedDict()
        """Closed session ids in closing order, so eviction pops from the front."""
        self._last_idle_sweep = clock()
        self.evicted = 0

    def create(self, **kwargs: Any) -> Session:
        self.sweep()
        now = self.clock()
        sid = "fs-" + secrets.token_urlsafe(18)
        session = Session(session_id=sid, created=now, last_active=now, **kwargs)
        self.sessions[sid] = session
        return session

    def get(self, session_id: str) -> Session | None:
        return self.sessions.get(session_id)

    def close(self, session: Session) -> None:
        if session.closed_at is None:
            session.closed_at = self.clock()
            self._closed[session.session_id] = session.closed_at
        self.sweep()

    @property
    def open_count(self) -> int:
        return len(self.sessions) - len(self._closed)

    def sweep(self) -> None:
        now = self.clock()
        while self._closed:
            sid, closed_at = next(iter(self._closed.items()))
            if now - closed_at < self.closed_ttl_s:
                break
            self._closed.popitem(last=False)
            if self.sessions.pop(sid, None) is not None:
                self.evicted += 1
        # Abandoned open sessions: a full scan, at most once per tenth of the idle TTL.
        if now - self._last_idle_sweep >= self.idle_ttl_s / 10:
            self._last_idle_sweep = now
            stale = [s for s in self.sessions.values() if s.closed_at is None and now - s.last_active >= self.idle_ttl_s]
            for s in stale:
                del self.sessions[s.session_id]
                self.evicted += 1
