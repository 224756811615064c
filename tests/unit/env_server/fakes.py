"""Unit-test stand-ins: an exec-based sandbox with the real API's shape, and a proxy at the HTTP transport.

The real sandbox, proxy and scripted upstream are exercised in tests/integration.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import time
from typing import Any, Callable

import httpx

from fathom.env_server.sandbox import RunResult


class FakeEpisode:
    def __init__(self, context: str, handler: Callable[[list[str]], list[str]] | None):
        self.ns: dict[str, Any] = {"context": context}
        self.final_answer: str | None = None
        self.closed = False
        self._final: str | None = None
        self._calls = 0

        def llm(p: str) -> str:
            return batch([p])[0]

        def batch(ps: list[str]) -> list[str]:
            if handler is None:
                raise RuntimeError("llm() is not available in this episode")
            self._calls += len(ps)
            try:
                return handler(list(ps))
            except Exception as e:
                raise RuntimeError(f"llm() failed: {e}") from None

        def final(x: Any) -> None:
            self._final = str(x)

        def final_var(name: str) -> None:
            self._final = str(self.ns[name])

        self.ns.update(llm=llm, llm_batch=batch, FINAL=final, FINAL_VAR=final_var)

    def run(self, code: str) -> RunResult:
        buf = io.StringIO()
        self.ns["print"] = lambda *a, **k: print(*a, **k, file=buf)
        self._final, self._calls = None, 0
        t0 = time.perf_counter()
        res = RunResult()
        try:
            exec(compile(code, "<repl>", "exec"), self.ns)
        except RecursionError:
            res.error, res.killed_reason = "RecursionError: maximum recursion depth exceeded\n", "crashed"
        except Exception as e:
            res.error = f"{type(e).__name__}: {e}\n"
        res.stdout, res.final_answer, res.llm_calls = buf.getvalue(), self._final, self._calls
        res.duration_ms = (time.perf_counter() - t0) * 1000
        if self._final is not None:
            self.final_answer = self._final
        return res

    def close(self) -> None:
        self.closed = True


class FakePool:
    def __init__(self) -> None:
        self.episodes: list[FakeEpisode] = []

    def new_episode(self, context: str, llm_handler: Any = None) -> FakeEpisode:
        ep = FakeEpisode(context, llm_handler)
        self.episodes.append(ep)
        return ep

    def close(self) -> None:
        pass


class FakeProxy:
    """An httpx transport playing the capture proxy: records each call's headers, answers with `model(messages)`."""

    def __init__(self, model: Callable[[list[dict[str, Any]]], str], usage: int = 10, delay_s: float = 0.0):
        self.model = model
        self.usage = usage
        self.delay_s = delay_s
        self.calls: list[dict[str, Any]] = []
        self.opened: list[dict[str, Any]] = []
        self.fail: Callable[[dict[str, Any]], httpx.Response | Exception | None] = lambda call: None
        self.in_flight = 0
        self.max_in_flight = 0
        self._ids = itertools.count(1)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/sessions":
            self.opened.append(json.loads(request.content))
            return httpx.Response(201, json={"session_id": f"new-{len(self.opened)}", "policy_version": 0,
                                             "model": "m", "trainable": True})
        if request.url.path.startswith("/sessions/"):
            total = sum(c["tokens"] for c in self.calls)
            return httpx.Response(200, json={"session_id": "s1", "policy_version": 0, "model": "m",
                                             "trainable": True, "total_tokens": total, "calls": len(self.calls)})
        body = json.loads(request.content)
        call = {"headers": dict(request.headers), "body": body, "tokens": 2 * self.usage}
        outcome = self.fail(call)
        if isinstance(outcome, Exception):
            raise outcome
        if isinstance(outcome, httpx.Response):
            return outcome
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            text = self.model(body["messages"])
        finally:
            self.in_flight -= 1
        self.calls.append(call)
        cid = f"call-{next(self._ids)}"
        call["id"] = cid
        return httpx.Response(
            200,
            headers={"X-Fathom-Call-Id": cid},
            json={"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                  "usage": {"prompt_tokens": self.usage, "completion_tokens": self.usage}},
        )

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handle), base_url="http://proxy")
