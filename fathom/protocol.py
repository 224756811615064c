"""Wire types shared across processes: proxy sessions, reward components, episode results.

These are the contracts between the capture proxy, the env server and (later) the
rollout worker. They import nothing else from fathom, so every component can use them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# --- per-call headers (DESIGN.md "Contracts") ---------------------------------------
HEADER_ROLE = "X-Fathom-Role"
HEADER_DEPTH = "X-Fathom-Depth"
HEADER_PARENT = "X-Fathom-Parent"
HEADER_API_KEY = "x-api-key"
"""The HF Jobs proxy strips Authorization, so the session id also travels here."""

HEADER_CALL_ID = "X-Fathom-Call-Id"
"""Response header with the proxy's id for the call; a sub-call sends it back as its parent."""

PUBLIC_MODEL_NAME = "policy"
"""Clients always name this model; the proxy rewrites it to the session's pinned version."""

Role = Literal["root", "subcall"]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Sampling(_Wire):
    """Sampling of one session. Trainable sessions force top_p=1, no top-k/min-p/penalties."""

    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = -1
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int = Field(512, gt=0)
    """Output cap per call; the same in training and evaluation."""


class Budgets(_Wire):
    """Per-session caps; a request past one gets 429 and is recorded as refused. None = unlimited."""

    max_calls: int | None = Field(None, gt=0)
    max_tokens: int | None = Field(None, gt=0)
    max_depth: int | None = Field(None, ge=0)


class SessionCreate(_Wire):
    """Body of `POST /sessions` on the capture proxy."""

    trainable: bool = True
    sampling: Sampling = Sampling()
    budgets: Budgets = Budgets()
    metadata: dict[str, Any] = {}
    """Free metadata, e.g. {"episode_id": ..., "task_id": ..., "group": ...}."""


class SessionInfo(BaseModel):
    """Summary returned by `POST /sessions` and `GET /sessions/{id}`."""

    session_id: str
    policy_version: int
    model: str
    """The pinned upstream model name every request of the session is rewritten to."""
    trainable: bool
    closed: bool = False
    calls: int = 0
    refused: int = 0
    failed: int = 0
    invalid_turns: int = 0
    flagged: bool = False
    """True once any turn failed validation; the trainer must not use the trace silently."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    calls_by_role: dict[str, int] = {}
    metadata: dict[str, Any] = {}


class RewardComponents(BaseModel):
    """Each reward component, returned and logged separately; `total` is their weighted sum."""

    correctness: float
    format: float
    token_budget: float
    recursion: float
    tool_bonus: float
    total: float
    correct: bool
    """Whether the answer matched the gold (the gate for recursion and tool bonus)."""


EpisodeStatus = Literal["pending", "running", "done", "error"]
StopReason = Literal["final", "max_turns", "max_tokens", "timeout", "budget", "error"]
