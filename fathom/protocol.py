"""Wire types shared across processes: proxy sessions, reward components, episode results.

These are the contracts between the capture proxy, the env server and (later) the
rollout worker. They import nothing else from fathom, so every component can use them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# --- per-call headers (docs/capture_proxy.md, "Model calls") -------------------------
HEADER_ROLE = "X-Fathom-Role"
HEADER_DEPTH = "X-Fathom-Depth"
HEADER_PARENT = "X-Fathom-Parent"
HEADER_API_KEY = "x-api-key"
"""The HF Jobs proxy strips Authorization, so the session id also travels here."""

HEADER_CONVERSATION = "X-Fathom-Conversation"
"""Which conversation a model call continues: the root episode or one nested sub-episode. Every turn of a
conversation after its first must extend the one before (token in, token out); plain `llm()` calls send none."""

HEADER_CALL_ID = "X-Fathom-Call-Id"
"""Response header with the proxy's id for the call; a sub-call sends it back as its parent."""

HEADER_SHARED_TOKEN = "X-Fathom-Token"
"""The shared token (config `shared_token` / `$FATHOM_SHARED_TOKEN`) the proxy and env server require when set.
Its own header because Authorization already carries the proxy's session id (and HF Jobs strips Authorization)."""


def token_headers(token: str | None) -> dict[str, str]:
    """Headers that carry the shared token to the proxy or env server; empty when there is none."""
    return {HEADER_SHARED_TOKEN: token} if token else {}


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
    model: str | None = Field(None, min_length=1)
    """Pin to this served model (the base or a loaded LoRA adapter) instead of the newest policy.
    Only for non-trainable sessions: evaluation compares base and adapter, or scores one checkpoint."""


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
    flag_reasons: list[str] = []
    """Why the session is flagged: one line per invalid turn, naming the call id and the failed check."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    calls_by_role: dict[str, int] = {}
    metadata: dict[str, Any] = {}
    sampling: dict[str, Any] = {}
    """The session's sampling (`Sampling` fields): its `max_tokens` is the output cap of every call."""


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
StopReason = Literal["final", "max_turns", "max_tokens", "timeout", "budget", "error", "cancelled"]
"""`cancelled`: ended by `DELETE /episodes/{id}` or by the env server shutting down (status error: unscorable)."""


# --- episodes run by the env server (POST /episodes, GET and DELETE /episodes/{id}) --


class EpisodeLimits(_Wire):
    """Per-episode caps; None takes the env server's configured default."""

    max_turns: int | None = Field(None, gt=0)
    max_depth: int | None = Field(None, ge=0)
    max_subcalls: int | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, gt=0)
    wall_clock_s: float | None = Field(None, gt=0)


class EpisodeRequest(_Wire):
    """Body of `POST /episodes` on the env server: one task against one capture-proxy session.

    Name the task by `task_id`, or by `family` + `seed` + `length` (all three).
    """

    episode_id: str | None = Field(None, min_length=1, max_length=200)
    """Caller-chosen id (the rollout worker's); generated when absent. Results are keyed by it."""
    task_id: str | None = None
    family: str | None = None
    seed: int | None = None
    length: int | None = Field(None, gt=0)
    session_id: str | None = None
    """Capture-proxy session the episode's calls are recorded in; the env server opens one when absent."""
    proxy_url: str | None = None
    """Capture proxy base URL (no /v1); the env server's configured default when absent."""
    limits: EpisodeLimits = EpisodeLimits()
    sampling: Sampling | None = None
    """Sampling sent with each chat request; None leaves it to the proxy session."""
    metadata: dict[str, Any] = {}


class SubCall(BaseModel):
    """One `llm()` prompt: a plain model call, or (deeper recursion) a nested RLM episode with its own turns."""

    depth: int
    parent_call_id: str | None = None
    call_id: str | None = None
    """Proxy call id of the plain call (None for a nested RLM episode: its turns carry the ids)."""
    prompt_chars: int
    prompt_preview: str
    response: str | None = None
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    turns: list["TurnStat"] = []
    """Turns of the nested RLM episode, when this sub-call ran as one."""


class TurnStat(BaseModel):
    """One model turn of an episode: what the model wrote, the code run, its output and the sub-calls it made."""

    index: int
    depth: int = 0
    call_id: str | None = None
    parent_call_id: str | None = None
    completion: str = ""
    finish_reason: str | None = None
    code_blocks: list[str] = []
    outputs: list[str] = []
    """What the model was shown for each code block (truncated REPL output)."""
    no_code: bool = False
    """The turn had no code block and got the corrective message."""
    final_answer: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_ms: float = 0.0
    sandbox_ms: float = 0.0
    """Time inside the sandbox's run() (measured in the thread that ran it)."""
    server_ms: float = 0.0
    """The rest of the turn's wall time: parsing, bookkeeping, thread hand-off, prompt building."""
    subcalls: list[SubCall] = []


SubCall.model_rebuild()


class EpisodeResult(BaseModel):
    """Body of `GET /episodes/{id}` (and of `POST /episodes`, with status pending)."""

    episode_id: str
    task_id: str | None = None
    session_id: str | None = None
    status: EpisodeStatus
    stop_reason: StopReason | None = None
    answer: str | None = None
    reward: float | None = None
    """`reward_components.total`; None while running and when unscorable (status error), never 0 for a failure."""
    reward_components: RewardComponents | None = None
    error: str | None = None
    turns: list[TurnStat] = []
    """Root turns; each holds its sub-calls, nested by depth (the recursion tree)."""
    llm_calls: int = 0
    total_tokens: int = 0
    wall_s: float = 0.0
    metadata: dict[str, Any] = {}
