"""A fake vLLM dev API and capture proxy over real HTTP (uvicorn in a thread), for the weight sync's call sequence.

It records every call in order and serves the routes merged sync uses: /pause, /resume, /reset_prefix_cache,
/collective_rpc (reload_weights: it reads the safetensors directory it is given, as vLLM's worker would),
vLLM's weight-transfer routes (/start_weight_update, /update_weights, /finish_weight_update), and the proxy's
/policy and /policy/version. `fail` names a route that answers 500.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.integration.capture_proxy.servers import UvicornThread


class FakeVllm:
    def __init__(self, fail: str | None = None):
        self.fail = fail
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.loaded: dict[str, Any] = {}
        """The tensors of the last reload, read back from the directory it named."""
        self.version = 0
        routes = ["/pause", "/resume", "/reset_prefix_cache", "/collective_rpc", "/start_weight_update",
                  "/update_weights", "/finish_weight_update", "/policy/version"]
        self.app = Starlette(routes=[Route(r, self.handle, methods=["POST"]) for r in routes]
                             + [Route("/policy", self.policy, methods=["GET"])])
        self.server = UvicornThread(self.app)

    @property
    def url(self) -> str:
        return self.server.url

    def paths(self) -> list[str]:
        return [p for p, _ in self.calls]

    async def policy(self, request: Request) -> JSONResponse:
        self.calls.append(("/policy", {}))
        return JSONResponse({"merged_version": self.version})

    async def handle(self, request: Request) -> JSONResponse:
        path = request.url.path
        body = await request.json() if (await request.body()) else {}
        self.calls.append((path, {**dict(request.query_params), **body}))
        if path == self.fail:
            return JSONResponse({"error": f"injected failure of {path}"}, status_code=500)
        if path == "/collective_rpc" and body.get("method") == "reload_weights":
            from safetensors.torch import load_file

            d = Path(body["kwargs"]["weights_path"])
            self.loaded = {k: v for f in sorted(d.glob("*.safetensors")) for k, v in load_file(f).items()}
        if path == "/policy/version":
            self.version = body["version"]
        if path == "/reset_prefix_cache":
            return JSONResponse({"success": True})
        return JSONResponse({})

    def __enter__(self) -> "FakeVllm":
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
