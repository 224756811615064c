"""The capture proxy's ASGI app: sessions, policy version, OpenAI-compatible model routes, health.

Routes
  POST   /sessions                 SessionCreate -> SessionInfo (pins the policy version)
  GET    /sessions/{id}            SessionInfo
  GET    /sessions/{id}/trace      OpenEnv TrainingTrace JSON (trainable, unflagged sessions)
  GET    /sessions/{id}/calls      every call record, including invalid, failed and refused ones
  DELETE /sessions/{id}            close; the session stays readable for session_ttl_s
  POST   /v1/chat/completions      proxied and captured (API key = session id)
  POST   /v1/completions           proxied and captured
  POST   /tokenize                 passed to vLLM's /tokenize (the env server checks its chat template)
  GET    /v1/models                the public model `policy`
  GET    /policy                   how `policy` resolves now
  POST   /policy/version           {"version": N}: the trainer's sync count under merged sync
  GET    /healthz, GET /metrics, GET /openapi.json (capture_proxy/openapi.py)
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Literal

import orjson
from fastapi import FastAPI
from openenv.core.harness.training import TrainingTrace
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from fathom.capture_proxy.calls import flush, handle_call
from fathom.capture_proxy.http import HTTPFail, error, json_response, read_json
from fathom.capture_proxy.openapi import openapi_schema
from fathom.capture_proxy.pinning import PinningError, UnknownModel
from fathom.capture_proxy.sessions import Session
from fathom.capture_proxy.state import ProxyState, make_state
from fathom.capture_proxy.upstream import UpstreamError
from fathom.config.capture_proxy import CaptureProxyConfig
from fathom.config.security import SharedTokenGate
from fathom.protocol import PUBLIC_MODEL_NAME, Budgets, SessionCreate

logger = logging.getLogger(__name__)

_BODY_CAP_SMALL = 1 << 20  # control-plane bodies (session create, policy version) are tiny


def _validation_message(what: str, e: ValidationError) -> str:
    parts = [f"{'.'.join(str(p) for p in err['loc']) or '(body)'}: {err['msg']}" for err in e.errors(include_url=False)]
    return f"{what} is invalid: " + "; ".join(parts)


def create_app(
    cfg: CaptureProxyConfig,
    *,
    upstream_url: str,
    base_model: str,
    weight_sync: Literal["adapter", "merged"] = "adapter",
    shared_token: str | None = None,
) -> "HotPath | SharedTokenGate":
    """`shared_token`: when set, every route but /healthz requires it as `X-Fathom-Token` (see config.security)."""
    state = make_state(cfg, upstream_url=upstream_url, base_model=base_model, weight_sync=weight_sync)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        await state.upstream.aclose()

    app = FastAPI(title="fathom capture proxy", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.proxy = state

    def lookup(session_id: str) -> Session:
        session = state.store.get(session_id)
        if session is None:
            raise HTTPFail(404, f"session {session_id!r} is unknown or was evicted (closed sessions are kept "
                                f"{cfg.session_ttl_s:g} s)", "unknown_session")
        flush(state, session)
        return session

    async def create_session(request: Request) -> Response:
        try:
            raw = await read_json(request, _BODY_CAP_SMALL)
            spec = SessionCreate.model_validate(raw or {})
        except HTTPFail as e:
            return e.response()
        except ValidationError as e:
            return error(422, _validation_message("POST /sessions body", e), "invalid_session_spec")
        s = spec.sampling
        if spec.trainable:
            off = [f"{k}={getattr(s, k)}" for k, neutral in (("top_p", 1.0), ("min_p", 0.0), ("presence_penalty", 0.0),
                   ("frequency_penalty", 0.0), ("repetition_penalty", 1.0)) if getattr(s, k) != neutral]
            if s.top_k not in (-1, 0):
                off.append(f"top_k={s.top_k}")
            if s.temperature <= 0:
                off.append(f"temperature={s.temperature}")
            if off:
                return error(422, "a trainable session samples the plain policy (temperature > 0, top_p 1, no top-k, "
                                  f"min-p or penalties) but got {', '.join(off)}; fix sampling or set trainable=false",
                             "invalid_session_spec")
        b = spec.budgets
        budgets = Budgets(
            max_calls=b.max_calls if b.max_calls is not None else cfg.default_max_calls,
            max_tokens=b.max_tokens if b.max_tokens is not None else cfg.default_max_tokens,
            max_depth=b.max_depth if b.max_depth is not None else cfg.default_max_depth,
        )
        if spec.model is not None and spec.trainable:
            return error(422, f"a trainable session samples the newest policy, so it cannot pin model {spec.model!r}; "
                              "set trainable=false (an eval session) or drop model", "invalid_session_spec")
        try:
            pin = await (state.pinner.resolve_named(spec.model) if spec.model else state.pinner.resolve())
        except PinningError as e:
            if isinstance(e, UnknownModel):
                return error(404, str(e), "unknown_model")
            state.upstream_ok = False
            return error(503, f"{e}; retry once the policy server is up", "policy_unavailable")
        state.upstream_ok = True
        session = state.store.create(
            trainable=spec.trainable, model=pin.model, policy_version=pin.version,
            sampling=s.model_dump(), budgets=budgets, metadata=spec.metadata,
        )
        state.metrics.inc("fathom_proxy_sessions_created_total")
        return json_response(session.info().model_dump(mode="json"), 201)

    async def get_session(request: Request) -> Response:
        try:
            return json_response(lookup(request.path_params["sid"]).info().model_dump(mode="json"))
        except HTTPFail as e:
            return e.response()

    async def get_trace(request: Request) -> Response:
        try:
            session = lookup(request.path_params["sid"])
        except HTTPFail as e:
            return e.response()
        if not session.trainable:
            return error(409, "session is not trainable (an eval session); read its calls at /sessions/{id}/calls",
                         "not_trainable")
        if session.flag_reasons:
            return error(409, "the capture of this session is broken, so it has no training trace: "
                              + " | ".join(session.flag_reasons), "invalid_capture")
        turns = [r.turn.model_dump() for r in session.trace_records()]
        try:
            # OpenEnv's own models validate every turn served, whatever was checked on arrival.
            trace = TrainingTrace.model_validate({"schema_version": 1, "turns": turns})
        except ValidationError as e:
            logger.error("session %s: captured turns fail OpenEnv's TrainingTrace: %s", session.session_id, e)
            return error(500, f"captured turns fail OpenEnv's TrainingTrace validation: {e}", "invalid_capture")
        return Response(trace.model_dump_json(), media_type="application/json")

    async def get_calls(request: Request) -> Response:
        try:
            session = lookup(request.path_params["sid"])
        except HTTPFail as e:
            return e.response()
        return json_response({"session": session.info().model_dump(mode="json"),
                              "calls": [r.summary() for r in session.records]})

    async def delete_session(request: Request) -> Response:
        try:
            session = lookup(request.path_params["sid"])
        except HTTPFail as e:
            return e.response()
        state.store.close(session)
        return json_response(session.info().model_dump(mode="json"))

    async def chat(request: Request) -> Response:
        return await handle_call(state, "chat", request)

    async def completions(request: Request) -> Response:
        return await handle_call(state, "completion", request)

    async def tokenize(request: Request) -> Response:
        """vLLM's /tokenize for the base model, so the env server can compare the served chat template with its own."""
        try:
            raw = await read_json(request, _BODY_CAP_SMALL)
        except HTTPFail as e:
            return e.response()
        if not isinstance(raw, dict):
            return error(400, "body must be a JSON object (vLLM's /tokenize request)", "invalid_json")
        prompt, messages = raw.get("prompt"), raw.get("messages")
        chat = isinstance(messages, list) and bool(messages) and all(isinstance(m, dict) for m in messages)
        # Exactly one of the two: with both, which one the engine tokenizes is up to the engine.
        if not ((isinstance(prompt, str) and messages is None) or (chat and prompt is None)):
            return error(400, 'body must carry exactly one of "prompt" (a string) or "messages" (a non-empty list '
                         "of chat messages)", "invalid_request")
        try:
            body = {k: v for k, v in raw.items() if v is not None or k not in ("prompt", "messages")}  # the one given
            resp = await state.upstream.post("/tokenize", orjson.dumps(body | {"model": base_model}))
        except UpstreamError as e:
            return error(502, f"policy server call failed: {e}", "upstream_" + e.kind)
        if resp.status >= 500:  # the engine's own failure is a bad gateway here, not this proxy's
            detail = resp.body[:300].decode("utf-8", "replace")
            return error(502, f"policy server answered HTTP {resp.status} to /tokenize: {detail}", "upstream_status")
        return Response(resp.body, status_code=resp.status, media_type="application/json")

    async def models(_request: Request) -> Response:
        return json_response({"object": "list", "data": [
            {"id": PUBLIC_MODEL_NAME, "object": "model", "owned_by": "fathom", "root": base_model}]})

    async def get_policy(_request: Request) -> Response:
        info = {"weight_sync": weight_sync, "base_model": base_model, "merged_version": state.pinner.merged_version}
        try:
            pin = await state.pinner.resolve()
            info["resolved"] = {"model": pin.model, "version": pin.version}
        except PinningError as e:
            info["resolved"], info["error"] = None, str(e)
        return json_response(info)

    async def post_policy_version(request: Request) -> Response:
        if weight_sync != "merged":
            return error(409, "weight_sync is 'adapter': policy versions come from the loaded "
                              f"{cfg.adapter_prefix}N adapters, not from POST /policy/version", "wrong_sync_mode")
        try:
            raw = await read_json(request, _BODY_CAP_SMALL)
        except HTTPFail as e:
            return e.response()
        version = raw.get("version") if isinstance(raw, dict) else None
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            return error(400, f'body must be {{"version": N}} with N a non-negative integer, got {raw!r}', "invalid_version")
        try:
            state.pinner.report_version(version)
        except ValueError as e:
            return error(409, str(e), "version_regressed")
        return json_response({"merged_version": state.pinner.merged_version})

    async def healthz(_request: Request) -> Response:
        return json_response({"status": "ok", "upstream": upstream_url, "upstream_ok": state.upstream_ok,
                              "sessions_open": state.store.open_count, "sessions_stored": len(state.store.sessions)})

    schema = openapi_schema()

    async def openapi(_request: Request) -> Response:
        return json_response(schema)

    async def metrics(_request: Request) -> Response:
        return PlainTextResponse(state.metrics.render(), media_type="text/plain; version=0.0.4")

    # Plain Starlette routes: no dependency injection or request models.
    for path, endpoint, methods in (
        ("/sessions", create_session, ["POST"]),
        ("/sessions/{sid}", get_session, ["GET"]),
        ("/sessions/{sid}", delete_session, ["DELETE"]),
        ("/sessions/{sid}/trace", get_trace, ["GET"]),
        ("/sessions/{sid}/calls", get_calls, ["GET"]),
        ("/v1/chat/completions", chat, ["POST"]),
        ("/v1/completions", completions, ["POST"]),
        ("/tokenize", tokenize, ["POST"]),
        ("/v1/models", models, ["GET"]),
        ("/policy", get_policy, ["GET"]),
        ("/policy/version", post_policy_version, ["POST"]),
        ("/healthz", healthz, ["GET"]),
        ("/metrics", metrics, ["GET"]),
        ("/openapi.json", openapi, ["GET"]),
    ):
        app.add_route(path, endpoint, methods=methods)
    front = HotPath(app, {"/v1/chat/completions": chat, "/v1/completions": completions})
    if not shared_token:
        return front
    return SharedTokenGate(front, shared_token, open_paths={"/healthz"}, bearer=False, what="capture proxy")


class HotPath:
    """ASGI front that sends the two model-call routes straight to their handlers.

    FastAPI's middleware stack (error, exception, exit-stack, body-limit layers) costs about 0.1 ms
    per request, a tenth of the proxy's added-latency budget; the model-call handlers return their
    own JSON errors and need none of it. Everything else goes through FastAPI.
    """

    def __init__(self, app: FastAPI, routes: dict) -> None:
        self.app = app
        self.routes = routes
        self.state = app.state

    async def __call__(self, scope, receive, send) -> None:
        handler = self.routes.get(scope.get("path")) if scope["type"] == "http" else None
        if handler is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        try:
            response = await handler(Request(scope, receive))
        except Exception as e:  # a bug must answer 500 JSON, not drop the connection
            logger.exception("model call failed inside the proxy")
            response = error(500, f"capture proxy internal error: {e!r}", "internal_error")
        await response(scope, receive, send)


__all__ = ["HotPath", "ProxyState", "create_app"]
