"""Real uvicorn servers in background threads for the proxy's tests: the proxy itself and a fake engine.

The fake engine answers like vLLM's OpenAI server (prompt_token_ids, per-choice token_ids and
logprobs) with canned tokens, and can be told to fail: time out, answer 500, drop the logprobs,
send a NaN logprob, or go away and come back (an engine restart).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fathom.capture_proxy import create_app
from fathom.config.capture_proxy import CaptureProxyConfig
from tests.ports import free_port


class _PromptServer(uvicorn.Server):
    """uvicorn's server, seeing `should_exit` within 10 ms instead of its 100 ms tick. Most tests here start and stop
    two servers (the proxy and the fake engine): one after the other, at uvicorn's tick, that took a third of a
    second of every such test."""

    async def main_loop(self) -> None:
        while not await self.on_tick(0):  # tick 0: the once-a-second work (the Date header) runs every tick, cheaply
            await asyncio.sleep(0.01)


class UvicornThread:
    """Serve an ASGI app on 127.0.0.1:`port` in a daemon thread; `stop()` shuts it down cleanly (`request_stop()`
    starts that shutdown without waiting for it, so several servers stop side by side)."""

    def __init__(self, app: Any, port: int | None = None) -> None:
        self.app = app
        self.port = port or free_port()
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "UvicornThread":
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="error", access_log=False,
                                lifespan="on")
        self.server = _PromptServer(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"test server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def request_stop(self) -> None:
        if self.server is not None:
            self.server.should_exit = True

    def stop(self) -> None:
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(timeout=20)
            self.server = self.thread = None

    def __enter__(self) -> "UvicornThread":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


BASE = "fake-base"


class FakeEngine:
    """State and ASGI app of a vLLM-shaped fake. `mode` picks the next answers' behaviour."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.delay_s = 0.0
        self.adapters: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.completion_len = 4
        self.app = Starlette(routes=[
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/tokenize", self.tokenize, methods=["POST"]),
        ])

    async def models(self, _request: Request) -> Response:
        data = [{"id": BASE, "object": "model", "parent": None, "root": "/models/base"}]
        data += [{"id": a, "object": "model", "parent": BASE, "root": f"/adapters/{a}"} for a in self.adapters]
        return JSONResponse({"object": "list", "data": data})

    def _tokens(self, body: dict[str, Any]) -> tuple[list[int], list[int], list[Any]]:
        # Prompt ids: one id per character of the rendered conversation, so a longer conversation's
        # ids start with a shorter one's, like a real chat template's.
        if "messages" in body:
            text = "".join(f"<{m.get('role')}>{m.get('content') or ''}" for m in body["messages"])
            prompt = [ord(c) % 1000 for c in text]
        elif isinstance(body["prompt"], str):
            prompt = [ord(c) % 1000 for c in body["prompt"]]
        else:
            prompt = list(body["prompt"])
        completion = [100 + i for i in range(self.completion_len)]
        logprobs: list[Any] = [-0.25 * (i + 1) for i in range(self.completion_len)]
        if self.mode == "nan":
            logprobs[1] = float("nan")
        return prompt, completion, logprobs

    async def _gate(self, request: Request) -> tuple[dict[str, Any] | None, Response | None]:
        body = json.loads(await request.body())
        self.requests.append(body)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.mode == "500":
            return None, JSONResponse({"error": {"message": "engine exploded"}}, status_code=500)
        if body.get("model") not in [BASE, *self.adapters]:
            return None, JSONResponse({"error": {"message": f"model {body.get('model')} not found"}}, status_code=404)
        return body, None

    def _json(self, obj: dict[str, Any]) -> Response:
        # json.dumps writes NaN as a bare literal, which is what a broken engine would send.
        return Response(json.dumps(obj), media_type="application/json")

    async def tokenize(self, request: Request) -> Response:
        body, fail = await self._gate(request)
        if fail is not None:
            return fail
        prompt, _, _ = self._tokens(body)
        return JSONResponse({"count": len(prompt), "max_model_len": 4096, "tokens": prompt})

    async def chat(self, request: Request) -> Response:
        body, fail = await self._gate(request)
        if fail is not None:
            return fail
        prompt, completion, logprobs = self._tokens(body)
        text = "ok " * len(completion)
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "finish_reason": "stop", "token_ids": completion}
        if self.mode != "nologprobs":
            choice["logprobs"] = {"content": [{"token": "ok", "logprob": lp} for lp in logprobs]}
        return self._json({"id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": body["model"],
                           "choices": [choice], "prompt_token_ids": prompt,
                           "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(completion),
                                     "total_tokens": len(prompt) + len(completion)}})

    async def completions(self, request: Request) -> Response:
        body, fail = await self._gate(request)
        if fail is not None:
            return fail
        prompt, completion, logprobs = self._tokens(body)
        choice: dict[str, Any] = {"index": 0, "text": "ok " * len(completion), "finish_reason": "length",
                                  "token_ids": completion, "prompt_token_ids": prompt}
        if self.mode != "nologprobs":
            choice["logprobs"] = {"token_logprobs": logprobs, "tokens": ["ok"] * len(completion),
                                  "text_offset": [], "top_logprobs": []}
        return self._json({"id": "cmpl-fake", "object": "text_completion", "created": 1, "model": body["model"],
                           "choices": [choice],
                           "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(completion),
                                     "total_tokens": len(prompt) + len(completion)}})


def proxy_app(upstream_url: str, base_model: str = BASE, weight_sync: str = "adapter", shared_token: str | None = None,
              **cfg: Any):
    return create_app(CaptureProxyConfig(**cfg), upstream_url=upstream_url, base_model=base_model,
                      weight_sync=weight_sync, shared_token=shared_token)  # type: ignore[arg-type]
