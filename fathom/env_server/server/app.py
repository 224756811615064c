"""The env server's FastAPI app: OpenEnv's routes (reset, step, state, health, schema, metadata, ws, mcp)
for the RLM environment, plus the episode runner (`POST /episodes`, `GET` and `DELETE /episodes/{id}`)."""

from __future__ import annotations

import functools
from typing import Any, Callable

from fastapi import FastAPI, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from openenv.core.env_server.http_server import HTTPEnvServer

from fathom.config import FathomConfig
from fathom.config.security import SharedTokenGate
from fathom.env_server.models import ENV_NAME, RLMAction, RLMObservation, RLMState
from fathom.env_server.server.environment import RLMEnvironment
from fathom.env_server.server.errors import EnvServerError, status_of
from fathom.env_server.server.limits import BodyCap, request_error_message
from fathom.env_server.server.runtime import Runtime
from fathom.protocol import EpisodeRequest, EpisodeResult


class _RLMServer(HTTPEnvServer):
    """Marks the environments of WebSocket sessions, so only those own (and close) their episode.

    OpenEnv's HTTP `/reset` and `/step` build and close an instance per request; an episode
    started there must outlive that instance, while a session's must die with the session.
    """

    async def _create_session(self) -> tuple[str, Any]:
        session_id, env = await super()._create_session()
        env.session_owned = True
        return session_id, env


def create_app(cfg: FathomConfig, pool_factory: Callable[[FathomConfig], Any] | None = None,
               tokenizer_dir: str | None = None) -> FastAPI:
    """`tokenizer_dir`: the served model's directory, used on the token path unless env_server.tokenizer names one."""
    rt = Runtime(cfg, pool_factory, tokenizer_dir)
    app = FastAPI(
        title="FATHOM env server",
        version="0.1.0",
        description="OpenEnv RLM environment and episode runner. "
                    "Episodes: POST /episodes, GET and DELETE /episodes/{id}.",
    )
    app.state.runtime = rt

    # Domain code raises EnvServerError; this is the one place it becomes an HTTP status. The body
    # keeps FastAPI's {"detail": ...} shape. (Over /ws, OpenEnv sends the message as the error.)
    async def domain_error(_request: Request, e: Exception) -> JSONResponse:
        assert isinstance(e, EnvServerError)
        return JSONResponse({"detail": str(e)}, status_code=status_of(e))

    app.add_exception_handler(EnvServerError, domain_error)

    # FastAPI's 422 lists locations only; add one sentence that names the route and each bad field.
    async def invalid_request(request: Request, e: Exception) -> JSONResponse:
        assert isinstance(e, RequestValidationError)
        return JSONResponse({"detail": jsonable_encoder(e.errors()),
                             "message": request_error_message(request.method, request.url.path, e.errors())},
                            status_code=422)

    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_middleware(BodyCap, cap=cfg.env_server.max_body_bytes, field="env_server.max_body_bytes")
    # Outermost, so OpenEnv's routes (HTTP and /ws) are gated too; the health probe stays open for supervisors.
    app.add_middleware(SharedTokenGate, token=cfg.token(), open_paths={"/health"}, what="env server")
    server = _RLMServer(
        functools.partial(RLMEnvironment, rt),
        RLMAction,
        RLMObservation,
        max_concurrent_envs=cfg.env_server.max_concurrent_envs,
        env_name=ENV_NAME,
        state_cls=RLMState,
    )

    @app.post("/episodes", response_model=EpisodeResult, status_code=202, tags=["Episodes"])
    async def start_episode(req: EpisodeRequest) -> EpisodeResult:
        """Run a whole episode against a capture-proxy session; poll GET /episodes/{id} for the result."""
        assert rt.episodes is not None
        return await rt.episodes.submit(req)

    @app.get("/episodes/{episode_id}", response_model=EpisodeResult, tags=["Episodes"])
    async def get_episode(
        episode_id: str, wait_s: float = Query(0.0, ge=0.0, le=600.0, description="Wait up to this long for the end")
    ) -> EpisodeResult:
        assert rt.episodes is not None
        return await rt.episodes.get(episode_id, wait_s)

    @app.delete("/episodes/{episode_id}", response_model=EpisodeResult, tags=["Episodes"])
    async def cancel_episode(episode_id: str) -> EpisodeResult:
        """End a pending or running episode now: unscorable, stop reason `cancelled`. A finished one is unchanged."""
        assert rt.episodes is not None
        return await rt.episodes.cancel(episode_id)

    # After the episode routes, so GET /episodes/{id} wins over OpenEnv's GET /{env_name}/splits.
    app.router.on_startup.append(rt.start)
    server.register_routes(app)
    app.router.on_shutdown.append(rt.stop)
    return app
