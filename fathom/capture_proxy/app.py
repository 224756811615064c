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

from fastapi import FastAPI
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from fathom.capture_proxy.calls import handle_call
from fathom.capture_proxy.errors import ProxyError
from fathom.capture_proxy.http import error, error_response, json_response, read_json, session_key
from fathom.capture_proxy.openapi import openapi_schema
from fathom.capture_proxy.service import CaptureService
from fathom.capture_proxy.state import ProxyState, make_state
from fathom.config.capture_proxy import CaptureProxyConfig
from fathom.config.security import SharedTokenGate

logger = logging.getLogger(__name__)

_BODY_CAP_SMALL = 1 << 20  # control-plane bodies (session create, policy version) are tiny


async def _proxy_error(_request: Request, e: Exception) -> Response:
    """The one exception handler: every domain error becomes its status and a JSON error body (http.STATUS)."""
    assert isinstance(e, ProxyError)
    return error_response(e)


def create_app(
    cfg: CaptureProxyConfig,
    *,
    upstream_url: str,
    base_model: str,
    weight_sync: Literal["adapter", "merged"] = "adapter",
    shared_token: str | None = None,
) -> "HotPath | SharedTokenGate":
    """`shared_token`: when set, every route but /healthz requires it as `X-Fathom-Token` (see config.security).

    Long because it is the route table: each route is a few lines that parse, call `CaptureService` and answer, and
    they close over the one service and state; split up, the table would no longer read in one place."""
    state = make_state(cfg, upstream_url=upstream_url, base_model=base_model, weight_sync=weight_sync)
    service = CaptureService(state, upstream_url=upstream_url, base_model=base_model, weight_sync=weight_sync)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        await state.upstream.aclose()

    app = FastAPI(title="fathom capture proxy", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None,
                  exception_handlers={ProxyError: _proxy_error})
    app.state.proxy = state

    def session_id(request: Request) -> str:
        return request.path_params["sid"]

    async def create_session(request: Request) -> Response:
        info = await service.create_session(await read_json(request, _BODY_CAP_SMALL))
        return json_response(info.model_dump(mode="json"), 201)

    async def get_session(request: Request) -> Response:
        return json_response(service.session(session_id(request)).info().model_dump(mode="json"))

    async def get_trace(request: Request) -> Response:
        return Response(service.trace(session_id(request)).model_dump_json(), media_type="application/json")

    async def get_calls(request: Request) -> Response:
        return json_response(service.calls(session_id(request)))

    async def delete_session(request: Request) -> Response:
        return json_response(service.close(session_id(request)).model_dump(mode="json"))

    def model_call(kind: str):
        async def route(request: Request) -> Response:
            try:
                answer = await handle_call(state, kind, session_key(request), lambda cap: read_json(request, cap),
                                           request.headers.get)
            except ProxyError as e:  # the hot path skips FastAPI's handlers (HotPath): map it here, the same way
                return error_response(e)
            task = BackgroundTask(answer.after) if answer.after is not None else None
            return Response(answer.body, media_type=answer.media_type, headers=answer.headers, background=task)
        return route

    async def tokenize(request: Request) -> Response:
        status, body = await service.tokenize(await read_json(request, _BODY_CAP_SMALL))
        return Response(body, status_code=status, media_type="application/json")

    async def models(_request: Request) -> Response:
        return json_response(service.models())

    async def get_policy(_request: Request) -> Response:
        return json_response(await service.policy())

    async def post_policy_version(request: Request) -> Response:
        service.require_merged_sync()  # refuse before reading the body
        return json_response(service.report_version(await read_json(request, _BODY_CAP_SMALL)))

    async def healthz(_request: Request) -> Response:
        return json_response(service.health())

    schema = openapi_schema()

    async def openapi(_request: Request) -> Response:
        return json_response(schema)

    async def metrics(_request: Request) -> Response:
        return PlainTextResponse(state.metrics.render(), media_type="text/plain; version=0.0.4")

    chat, completions = model_call("chat"), model_call("completion")
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
