"""Unit-test stand-ins: an exec-based sandbox with the real API's shape, and a proxy at the HTTP transport.

The real sandbox, proxy and scripted upstream are exercised in tests/integration.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import re
import time
from typing import Any, Callable

import httpx

from fathom.env_server.sandbox import RunResult, toolbox

# The REPL's helpers (grep, line_at, ...), which reference programs call: plain Python here, since the fake REPL runs
# trusted test code (the restricted ones: tests/integration/sandbox). Compiled once, installed in every episode.
_TOOLBOX = compile(toolbox.SOURCE, "<toolbox>", "exec")


class FakeEpisode:
    def __init__(self, context: str, handler: Callable[[list[str]], list[str]] | None,
                 variables: dict[str, str] | None = None):
        self.ns: dict[str, Any] = {**(variables or {}), "context": context}
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
            except Exception as e:  # noqa: BLE001 - the fake REPL reports every handler failure as llm()'s
                raise RuntimeError(f"llm() failed: {e}") from None

        def final(x: Any) -> None:
            self._final = str(x)

        def final_var(name: str) -> None:
            self._final = str(self.ns[name])

        self.ns.update(llm=llm, llm_batch=batch, FINAL=final, FINAL_VAR=final_var)
        toolbox.install(self.ns, {}, _TOOLBOX, context, re)

    def run(self, code: str) -> RunResult:
        buf = io.StringIO()
        self.ns["print"] = lambda *a, **k: print(*a, **k, file=buf)
        self._final, self._calls = None, 0
        t0 = time.perf_counter()
        res = RunResult()
        try:
            exec(compile(code, "<repl>", "exec"), self.ns)  # noqa: S102 - the fake REPL runs trusted test code
        except RecursionError:
            res.error, res.killed_reason = "RecursionError: maximum recursion depth exceeded\n", "crashed"
        except Exception as e:  # noqa: BLE001 - user code's error is the REPL's output, as in the real sandbox
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

    def new_episode(self, context: str, llm_handler: Any = None,
                    variables: dict[str, str] | None = None) -> FakeEpisode:
        ep = FakeEpisode(context, llm_handler, variables)
        self.episodes.append(ep)
        return ep

    def close(self) -> None:
        pass


def byte_tokenizer() -> Any:
    """A real HF fast tokenizer, one token per byte plus Qwen's chat markers, with TRL's Qwen2.5 template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from fathom.policy_server.models import qwen25_chat_template

    vocab = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", bos_token="<|im_start|>",
                                  additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    tok.chat_template = qwen25_chat_template()
    return tok


class FakeProxy:
    """An httpx transport playing the capture proxy: records each call's headers, answers with `model(messages)`.

    With `tokens` (a ChatTokens) it also plays the token path: `/tokenize` renders with the same template, and
    `/v1/completions` decodes the prompt ids, answers `model(prompt_text)` and samples its canonical ids + <|im_end|>.
    """

    def __init__(self, model: Callable[[Any], str], usage: int = 10, delay_s: float = 0.0, tokens: Any = None,
                 max_model_len: int = 100_000):
        self.model = model
        self.tokens = tokens
        self.max_model_len = max_model_len
        self.served_probe: list[int] | None = None
        """When set, what /tokenize answers instead of the template's rendering (a mismatched engine)."""
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
        if request.url.path == "/tokenize":
            ids = self.served_probe or self.tokens.initial(body["messages"])
            return httpx.Response(200, json={"tokens": ids, "count": len(ids), "max_model_len": self.max_model_len})
        if request.url.path == "/v1/completions":
            return await self._complete(request, body)
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

    async def _complete(self, request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        prompt = body["prompt"]
        call = {"headers": dict(request.headers), "body": body, "tokens": 0}
        outcome = self.fail(call)
        if isinstance(outcome, Exception):
            raise outcome
        if isinstance(outcome, httpx.Response):
            return outcome
        text = self.model(self.tokens.tok.decode(prompt))
        ids = self.tokens.encode(text) + [self.tokens.eot_id]
        finish = "stop"
        cap = body.get("max_tokens")
        if cap and len(ids) > cap:
            ids, finish = ids[:cap], "length"
            text = self.tokens.tok.decode(ids)
        call["tokens"] = len(prompt) + len(ids)
        self.calls.append(call)
        cid = f"call-{next(self._ids)}"
        call["id"] = cid
        choice = {"index": 0, "text": text, "token_ids": ids, "prompt_token_ids": prompt, "finish_reason": finish}
        return httpx.Response(200, headers={"X-Fathom-Call-Id": cid}, json={
            "choices": [choice], "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids)}})

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handle), base_url="http://proxy")


class HangsAfterFirstCall(FakeProxy):
    """Answers the first model call; every later one waits forever, so only a wall clock can end the episode,
    after exactly one turn, however fast or loaded the machine is."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.never = asyncio.Event()

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/chat/completions") and self.calls:
            await self.never.wait()
        return await super().handle(request)
