"""The model-call path: authenticate, check budgets, rewrite, call vLLM, capture, validate, answer.

Domain code: it raises `errors.ProxyError`s and returns a `CallAnswer`; app.py turns both into HTTP.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Awaitable, Callable

import orjson

from fathom.capture_proxy.capture import BadRequest, extract, parse_json, prepare
from fathom.capture_proxy.errors import (
    BudgetExhausted,
    InvalidRequest,
    ProxyError,
    SessionRequired,
    UpstreamFailed,
)
from fathom.capture_proxy.sessions import CallRecord, Session
from fathom.capture_proxy.sse import replay
from fathom.capture_proxy.state import ProxyState
from fathom.capture_proxy.upstream import UpstreamError
from fathom.capture_proxy.validation import build_turn
from fathom.protocol import HEADER_CALL_ID, HEADER_CONVERSATION, HEADER_DEPTH, HEADER_PARENT, HEADER_ROLE

PATHS = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}
# Upstream statuses that mean "this request cannot succeed as sent" (e.g. prompt past the context
# length): passed through so the harness stops, instead of a 502 it would retry unchanged.
_CLIENT_ERRORS = (400, 413, 422)


@dataclass(slots=True)
class CallAnswer:
    """What goes back to the caller: the engine's bytes (or an SSE replay of them), and the capture work that
    runs once they are sent (`after`, None when the capture already ran)."""

    body: bytes
    media_type: str
    headers: dict[str, str]
    after: Callable[[], Awaitable[None]] | None = None


def call_headers(header: Callable[[str], str | None]) -> tuple[str, int, str | None, str | None]:
    role = header(HEADER_ROLE) or "root"
    if role not in ("root", "subcall"):
        raise InvalidRequest(f"{HEADER_ROLE} must be 'root' or 'subcall', got {role!r}", "invalid_header")
    depth_text = header(HEADER_DEPTH)
    if depth_text is None:
        depth = 0 if role == "root" else 1
    elif depth_text.isdigit():
        depth = int(depth_text)
    else:
        raise InvalidRequest(f"{HEADER_DEPTH} must be a non-negative integer, got {depth_text!r}", "invalid_header")
    conversation = header(HEADER_CONVERSATION) or None
    if conversation is not None and len(conversation) > 200:
        raise InvalidRequest(f"{HEADER_CONVERSATION} must be at most 200 characters", "invalid_header")
    return role, depth, header(HEADER_PARENT) or None, conversation


def authenticate(state: ProxyState, sid: str | None) -> Session:
    session = state.store.get(sid) if sid else None
    if session is None or session.closed:
        state.metrics.inc("fathom_proxy_rejected_total", reason="session")
        what = "no session id was sent" if not sid else (
            "the session is closed" if session is not None else "the session id is unknown (or evicted)")
        raise SessionRequired(f"{what}; open one with POST /sessions and send its id as the API key "
                              "(Authorization: Bearer <id> or x-api-key)")
    return session


async def handle_call(state: ProxyState, kind: str, sid: str | None,
                      read_body: Callable[[int], Awaitable[Any]], header: Callable[[str], str | None]) -> CallAnswer:
    """One captured model call. `read_body(cap)` reads the request's JSON (after the session is known, so an
    unauthenticated caller never makes the proxy read its body); `header(name)` reads a request header."""
    t0 = time.perf_counter()
    try:
        session = authenticate(state, sid)
        body = await read_body(state.cfg.max_body_bytes)
        if not isinstance(body, dict):
            raise InvalidRequest("request body must be a JSON object", "invalid_json")
        role, depth, parent, conversation = call_headers(header)
        prep = prepare(kind, body, model=session.model, sampling=session.sampling, trainable=session.trainable)
    except BadRequest as e:
        state.metrics.inc("fathom_proxy_rejected_total", reason="bad_request")
        raise InvalidRequest(str(e)) from None
    except ProxyError as e:
        if not isinstance(e, SessionRequired):  # counted where it was raised
            state.metrics.inc("fathom_proxy_rejected_total", reason=e.code)
        raise

    session.last_active = state.store.clock()
    flush(state, session)  # budgets count the tokens of every earlier call
    record = CallRecord(session.next_call_id(), len(session.records), role, depth, parent, "pending",
                        conversation=conversation)
    session.records.append(record)
    headers = {HEADER_CALL_ID: record.call_id, "X-Fathom-Policy-Version": str(session.policy_version)}
    # No await between this check and the counting below, so concurrent calls cannot overrun a budget.
    refusal = session.budget_refusal(depth)
    if refusal is not None:
        record.status, record.error = "refused", refusal
        session.refused += 1
        state.metrics.inc("fathom_proxy_calls_total", role=role, status="refused")
        raise BudgetExhausted(refusal + "; the episode should stop", headers=headers)
    session.calls += 1
    session.calls_by_role[role] = session.calls_by_role.get(role, 0) + 1

    t_up = time.perf_counter()
    # The weights' version when the call is sent and when it is answered: under merged sync a sync that lands in
    # between (vLLM paused with in-flight requests kept) makes the turn's tokens come from two policies.
    record.metadata["policy_version_start"] = _version_now(state, session)
    try:
        resp = await state.upstream.post(PATHS[kind], orjson.dumps(prep.body))
    except UpstreamError as e:
        state.upstream_ok = False
        raise _failed(state, session, record, e.kind, f"policy server call failed: {e}", headers) from None
    up_s = time.perf_counter() - t_up
    record.metadata["policy_version"] = _version_now(state, session)
    state.upstream_ok = True
    if resp.status != 200:
        detail = resp.body[:300].decode("utf-8", "replace")
        msg = f"policy server answered HTTP {resp.status}: {detail}"
        status = resp.status if resp.status in _CLIENT_ERRORS else None
        raise _failed(state, session, record, "status", msg, headers, status)
    try:
        data = parse_json(resp.body, "policy server response")
    except InvalidRequest:
        data = None
    if not isinstance(data, dict):
        raise _failed(state, session, record, "protocol", "policy server response is not a JSON object", headers)

    record.status = "captured"
    session.pending.append((record, kind, body, data, up_s))
    if prep.stream:
        flush(state, session)  # the SSE replay needs the parsed result anyway; keep arrival order
        payload = replay(kind, data, include_usage=prep.include_usage, client_logprobs=prep.client_logprobs)
        out = CallAnswer(payload, "text/event-stream", {**headers, "Cache-Control": "no-cache"})
    else:
        # The engine's bytes go back untouched, and capture (extract + validate, ~0.2 ms) runs right
        # after the answer is sent. Every reader of the session calls `flush` first, so nobody can
        # observe a session whose last call is not yet validated and counted.
        out = CallAnswer(resp.body, "application/json", headers, after=partial(_flush_async, state, session))
    total = time.perf_counter() - t0
    state.upstream_latency.observe(up_s)
    state.overhead.observe(max(total - up_s, 0.0))
    return out


def flush(state: ProxyState, session: Session) -> None:
    """Capture every answered call of `session` not yet captured, in arrival order."""
    while session.pending:
        record, kind, body, data, up_s = session.pending.popleft()
        _capture(state, session, record, kind, body, data, up_s)


async def _flush_async(state: ProxyState, session: Session) -> None:
    flush(state, session)


def _failed(state: ProxyState, session: Session, record: CallRecord, kind: str, msg: str,
            headers: dict[str, str], status: int | None = None) -> UpstreamFailed:
    """Record the call as failed and return the error to raise (the call id rides in its headers)."""
    record.status, record.error = "failed", msg
    session.failed += 1
    state.metrics.inc("fathom_proxy_upstream_errors_total", kind=kind)
    state.metrics.inc("fathom_proxy_calls_total", role=record.role, status="failed")
    return UpstreamFailed(msg, "upstream_" + kind, headers, status)


def _capture(state: ProxyState, session: Session, record: CallRecord, kind: str,
             body: dict[str, Any], data: dict[str, Any], up_s: float) -> None:
    cap = extract(kind, data)
    session.prompt_tokens += cap.prompt_tokens
    session.completion_tokens += cap.completion_tokens
    state.metrics.inc("fathom_proxy_tokens_total", cap.prompt_tokens, kind="prompt")
    state.metrics.inc("fathom_proxy_tokens_total", cap.completion_tokens, kind="completion")
    role_trainable = session.trainable and record.role in state.trainable_roles
    meta: dict[str, Any] = {
        "call_index": record.index, "role": record.role, "depth": record.depth, "parent_call_id": record.parent,
        "policy_version": record.metadata["policy_version"],
        "policy_version_start": record.metadata["policy_version_start"],
        "model": session.model, "finish_reason": cap.finish_reason,
        "latency_s": round(up_s, 6), "episode_id": session.metadata.get("episode_id"),
        "trainable": role_trainable, "valid": True, "kind": kind,
    }
    if record.chain is not None:
        meta["conversation"] = record.chain
    request = {"temperature": body.get("temperature"), "max_tokens": body.get("max_tokens")}
    response: dict[str, Any] = {"finish_reason": cap.finish_reason}
    if state.cfg.keep_messages:
        request["messages" if kind == "chat" else "prompt"] = body.get("messages" if kind == "chat" else "prompt")
        response["text"] = cap.text
    turn, err = build_turn(record.call_id, cap, trainable=role_trainable, request=request, response=response, metadata=meta)
    record.metadata = meta
    if turn is None:
        meta["valid"] = False
        record.status, record.error = "invalid", err
        record.raw = {"prompt_token_ids": cap.prompt_ids, "completion_token_ids": cap.completion_ids,
                      "per_token_logps": _jsonable(cap.logprobs)}
        session.invalid_turns += 1
        session.flag_reasons.append(f"call {record.call_id} (#{record.index}, {record.role}): {err}")
        state.metrics.inc("fathom_proxy_calls_total", role=record.role, status="invalid")
        return
    record.status, record.turn = "ok", turn
    if record.chain is not None:
        meta.update(_prefix_link(session, record))
        session.last_turn[record.chain] = record
    state.metrics.inc("fathom_proxy_calls_total", role=record.role, status="ok")


def _version_now(state: ProxyState, session: Session) -> int:
    # Under merged sync the weights change in place, so a call records the sync count current when it is sent
    # and when it is answered; under adapter sync the pinned adapter is the version.
    if state.pinner.weight_sync == "merged":
        return state.pinner.merged_version
    return session.policy_version


def _prefix_link(session: Session, record: CallRecord) -> dict[str, Any]:
    """Whether this turn's prompt starts with its conversation's previous turn's prompt + completion ids.

    On a trainable session a turn of a declared conversation (X-Fathom-Conversation) that does not is a bug
    (token in, token out was broken somewhere), so the session is flagged and its trace refused, naming the
    turn. Eval sessions, and root calls that declare no conversation, only record where.
    """
    prev = session.last_turn.get(record.chain or "")
    if prev is None:
        return {}
    prompt_ids = record.turn.prompt_token_ids
    before = prev.turn.prompt_token_ids + prev.turn.completion_token_ids
    if prompt_ids[: len(before)] == before:
        return {"extends_call_id": prev.call_id}
    n = min(len(before), len(prompt_ids))
    at = next((i for i in range(n) if prompt_ids[i] != before[i]), n)
    if session.trainable and record.conversation is not None:
        session.flag_reasons.append(
            f"call {record.call_id} (#{record.index}, {record.role}, conversation {record.conversation}) does not "
            f"extend call {prev.call_id}: its prompt differs from that turn's prompt + completion ids at token {at}; "
            "every turn of a conversation must be sent as the previous prompt + completion ids + new tokens")
    return {"extends_call_id": None, "diverges_from_call_id": prev.call_id, "divergence_index": at}


def _jsonable(values: Any) -> Any:
    if isinstance(values, list):
        return [v if not isinstance(v, float) or v == v and abs(v) != float("inf") else str(v) for v in values]
    return values
