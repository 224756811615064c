"""The capture proxy's control plane as a service: sessions, traces, the policy version, tokenize, health.

It takes parsed values and returns models or dicts, raising `errors.ProxyError`s; it knows nothing of HTTP.
The model-call path is `calls.handle_call`. app.py maps both onto routes.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import orjson
from openenv.core.harness.training import TrainingTrace
from pydantic import ValidationError

from fathom.capture_proxy.calls import flush
from fathom.capture_proxy.errors import (
    Conflict,
    InvalidCapture,
    InvalidRequest,
    InvalidSessionSpec,
    PolicyUnavailable,
    UnknownServedModel,
    UnknownSession,
    UpstreamFailed,
)
from fathom.capture_proxy.pinning import PinningError, UnknownModel
from fathom.capture_proxy.sessions import Session
from fathom.capture_proxy.state import ProxyState
from fathom.capture_proxy.upstream import UpstreamError
from fathom.protocol import PUBLIC_MODEL_NAME, Budgets, Sampling, SessionCreate, SessionInfo

logger = logging.getLogger(__name__)

# A trainable session samples the plain policy, so its logprobs are the ones the trainer recomputes.
_NEUTRAL = (("top_p", 1.0), ("min_p", 0.0), ("presence_penalty", 0.0), ("frequency_penalty", 0.0),
            ("repetition_penalty", 1.0))


def validation_message(what: str, e: ValidationError) -> str:
    parts = [f"{'.'.join(str(p) for p in err['loc']) or '(body)'}: {err['msg']}" for err in e.errors(include_url=False)]
    return f"{what} is invalid: " + "; ".join(parts)


def _not_plain_policy(s: Sampling) -> list[str]:
    off = [f"{k}={getattr(s, k)}" for k, neutral in _NEUTRAL if getattr(s, k) != neutral]
    if s.top_k not in (-1, 0):
        off.append(f"top_k={s.top_k}")
    if s.temperature <= 0:
        off.append(f"temperature={s.temperature}")
    return off


class CaptureService:
    def __init__(self, state: ProxyState, *, upstream_url: str, base_model: str,
                 weight_sync: Literal["adapter", "merged"]) -> None:
        self.state, self.upstream_url, self.base_model, self.weight_sync = state, upstream_url, base_model, weight_sync

    # sessions

    async def create_session(self, raw: Any) -> SessionInfo:
        state, cfg = self.state, self.state.cfg
        try:
            spec = SessionCreate.model_validate(raw or {})
        except ValidationError as e:
            raise InvalidSessionSpec(validation_message("POST /sessions body", e)) from None
        if spec.trainable and (off := _not_plain_policy(spec.sampling)):
            raise InvalidSessionSpec("a trainable session samples the plain policy (temperature > 0, top_p 1, no "
                                     f"top-k, min-p or penalties) but got {', '.join(off)}; fix sampling or set "
                                     "trainable=false")
        if spec.model is not None and spec.trainable:
            raise InvalidSessionSpec(f"a trainable session samples the newest policy, so it cannot pin model "
                                     f"{spec.model!r}; set trainable=false (an eval session) or drop model")
        b = spec.budgets
        budgets = Budgets(
            max_calls=b.max_calls if b.max_calls is not None else cfg.default_max_calls,
            max_tokens=b.max_tokens if b.max_tokens is not None else cfg.default_max_tokens,
            max_depth=b.max_depth if b.max_depth is not None else cfg.default_max_depth,
        )
        try:
            pin = await (state.pinner.resolve_named(spec.model) if spec.model else state.pinner.resolve())
        except UnknownModel as e:
            raise UnknownServedModel(str(e)) from None
        except PinningError as e:
            state.upstream_ok = False
            raise PolicyUnavailable(f"{e}; retry once the policy server is up") from None
        state.upstream_ok = True
        session = state.store.create(
            trainable=spec.trainable, model=pin.model, policy_version=pin.version,
            sampling=spec.sampling.model_dump(), budgets=budgets, metadata=spec.metadata,
        )
        state.metrics.inc("fathom_proxy_sessions_created_total")
        return session.info()

    def session(self, session_id: str) -> Session:
        """The session with every answered call captured (readers never see a call not yet validated)."""
        session = self.state.store.get(session_id)
        if session is None:
            raise UnknownSession(f"session {session_id!r} is unknown or was evicted (closed sessions are kept "
                                 f"{self.state.cfg.session_ttl_s:g} s)")
        flush(self.state, session)
        return session

    def trace(self, session_id: str) -> TrainingTrace:
        session = self.session(session_id)
        if not session.trainable:
            raise Conflict("session is not trainable (an eval session); read its calls at /sessions/{id}/calls",
                           "not_trainable")
        if session.flag_reasons:
            raise Conflict("the capture of this session is broken, so it has no training trace: "
                           + " | ".join(session.flag_reasons), "invalid_capture")
        turns = [r.turn.model_dump() for r in session.trace_records()]
        try:
            # OpenEnv's own models validate every turn served, whatever was checked on arrival.
            return TrainingTrace.model_validate({"schema_version": 1, "turns": turns})
        except ValidationError as e:
            logger.error("session %s: captured turns fail OpenEnv's TrainingTrace: %s", session.session_id, e)
            raise InvalidCapture(f"captured turns fail OpenEnv's TrainingTrace validation: {e}") from None

    def calls(self, session_id: str) -> dict[str, Any]:
        session = self.session(session_id)
        return {"session": session.info().model_dump(mode="json"), "calls": [r.summary() for r in session.records]}

    def close(self, session_id: str) -> SessionInfo:
        session = self.session(session_id)
        self.state.store.close(session)
        return session.info()

    # the engine and the policy

    async def tokenize(self, raw: Any) -> tuple[int, bytes]:
        """vLLM's /tokenize for the base model, so the env server can compare the served chat template with its
        own: the engine's status and body."""
        if not isinstance(raw, dict):
            raise InvalidRequest("body must be a JSON object (vLLM's /tokenize request)", "invalid_json")
        prompt, messages = raw.get("prompt"), raw.get("messages")
        chat = isinstance(messages, list) and bool(messages) and all(isinstance(m, dict) for m in messages)
        # Exactly one of the two: with both, which one the engine tokenizes is up to the engine.
        if not ((isinstance(prompt, str) and messages is None) or (chat and prompt is None)):
            raise InvalidRequest('body must carry exactly one of "prompt" (a string) or "messages" (a non-empty '
                                 "list of chat messages)")
        body = {k: v for k, v in raw.items() if v is not None or k not in ("prompt", "messages")}  # the one given
        try:
            resp = await self.state.upstream.post("/tokenize", orjson.dumps(body | {"model": self.base_model}))
        except UpstreamError as e:
            raise UpstreamFailed(f"policy server call failed: {e}", "upstream_" + e.kind) from None
        if resp.status >= 500:  # the engine's own failure is a bad gateway here, not this proxy's
            detail = resp.body[:300].decode("utf-8", "replace")
            raise UpstreamFailed(f"policy server answered HTTP {resp.status} to /tokenize: {detail}",
                                 "upstream_status")
        return resp.status, resp.body

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [
            {"id": PUBLIC_MODEL_NAME, "object": "model", "owned_by": "fathom", "root": self.base_model}]}

    async def policy(self) -> dict[str, Any]:
        pinner = self.state.pinner
        info: dict[str, Any] = {"weight_sync": self.weight_sync, "base_model": self.base_model,
                                "merged_version": pinner.merged_version}
        try:
            pin = await pinner.resolve()
            info["resolved"] = {"model": pin.model, "version": pin.version}
        except PinningError as e:
            info["resolved"], info["error"] = None, str(e)
        return info

    def require_merged_sync(self) -> None:
        if self.weight_sync != "merged":
            raise Conflict("weight_sync is 'adapter': policy versions come from the loaded "
                           f"{self.state.cfg.adapter_prefix}N adapters, not from POST /policy/version",
                           "wrong_sync_mode")

    def report_version(self, raw: Any) -> dict[str, int]:
        """The trainer's sync count under merged sync; it never goes backwards."""
        self.require_merged_sync()
        version = raw.get("version") if isinstance(raw, dict) else None
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise InvalidRequest(f'body must be {{"version": N}} with N a non-negative integer, got {raw!r}',
                                 "invalid_version")
        try:
            self.state.pinner.report_version(version)
        except ValueError as e:
            raise Conflict(str(e), "version_regressed") from None
        return {"merged_version": self.state.pinner.merged_version}

    def health(self) -> dict[str, Any]:
        store = self.state.store
        return {"status": "ok", "upstream": self.upstream_url, "upstream_ok": self.state.upstream_ok,
                "sessions_open": store.open_count, "sessions_stored": len(store.sessions)}
