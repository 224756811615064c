"""What runs `fathom ui`'s episodes: the same machinery as `fathom ask`, kept alive between episodes.

One event loop thread holds, per base model the endpoint serves, a capture proxy in this process (eval
sessions pinned to the chosen base or adapter) and an env-server `Runtime` (sandbox zygote, token path).
Each episode is the harness's root loop with the page's `LiveEpisode` as its event hook, then the env
server's own verifier when there is a gold answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from typing import Any

from fathom.config import FathomConfig
from fathom.policy_server.served import list_models, served
from fathom.ui.errors import error_text
from fathom.ui.live import LiveEpisode
from fathom.ui.tree import Outcome


START_TIMEOUT_S = 120.0
"""How long a page's run waits for its base's runtime to start (sandbox zygote, tokenizer, the template check
against the engine: about 10 s on 2 idle cores, far longer on a machine short of memory)."""


class RuntimeStartError(RuntimeError):
    """The episode runtime for a base did not start (or not in time); the message says which and what to do."""


class Backend:
    def __init__(self, cfg: FathomConfig, base_url: str, *, tokenizer: str | None = None, max_turns: int | None = None,
                 start_timeout_s: float = START_TIMEOUT_S):
        self.cfg, self.base_url, self.tokenizer = cfg, base_url.rstrip("/"), tokenizer
        self.max_turns = max_turns or cfg.env_server.max_turns
        self.start_timeout_s = start_timeout_s
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fathom-ui-episodes", daemon=True)
        self._thread.start()
        self._servers = contextlib.ExitStack()
        self._starter = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="fathom-ui-start")
        self._starts: dict[str, concurrent.futures.Future[tuple[Any, str, str]]] = {}
        """base model -> its start: (Runtime, proxy URL, path note). A start that outlives one run's wait goes on,
        and the next run waits on the same one: a runtime is never started twice."""
        self._start_lock = threading.Lock()

    def models(self) -> list[tuple[str, str]]:
        """(label, name) of each served model; raises `ServedError` when the endpoint does not answer."""
        out = []
        for c in list_models(self.base_url):
            parent = c.get("parent")
            out.append((f"{c['id']} (adapter on {parent})" if parent else c["id"], c["id"]))
        return out

    def warm(self, model: str) -> None:
        """Start `model`'s base now (sandbox zygote, tokenizer, proxy), so the first episode does not wait on it."""
        self._base(served(self.base_url, model)[1])

    def _base(self, base: str) -> tuple[Any, str, str]:
        """The Runtime and proxy for `base`, started on first use; waits at most `start_timeout_s` for it.
        Raises `RuntimeStartError` with the cause (never an empty message), and retries a start that failed."""
        with self._start_lock:
            fut = self._starts.get(base)
            if fut is None or (fut.done() and fut.exception() is not None):
                fut = self._starts[base] = self._starter.submit(self._start, base)
        try:
            return fut.result(timeout=self.start_timeout_s)
        except Exception as e:
            if not fut.done():  # our wait ran out, not the start: it goes on, and the next run waits on it
                raise RuntimeStartError(
                    f"the episode runtime for {base!r} (sandbox, tokenizer, chat-template check against "
                    f"{self.base_url}) did not start within {self.start_timeout_s:.0f} s; it is still starting: run "
                    "again in a minute. A machine short of memory or CPU does this: an unbounded vLLM KV cache on CPU "
                    "fills memory (`fathom serve` bounds it; docs/policy_server.md)") from None
            raise RuntimeStartError(f"could not start the episode runtime for {base!r}: {error_text(e)}") from e

    def _start(self, base: str) -> tuple[Any, str, str]:
        """Start `base`'s proxy and Runtime (blocking, in the starter thread); on failure nothing is left running."""
        from fathom.env_server.server.runtime import Runtime
        from fathom.stack.inproc import capture_in_process

        with contextlib.ExitStack() as stack:
            cfg, proxy_url, note = stack.enter_context(capture_in_process(self.cfg, self.base_url, base, self.tokenizer))
            rt = Runtime(cfg)
            # Stops what a failed start did start (the sandbox zygote), and, at close, the whole runtime.
            stack.callback(lambda: asyncio.run_coroutine_threadsafe(rt.stop(), self.loop).result(timeout=30))
            asyncio.run_coroutine_threadsafe(rt.start(), self.loop).result()
            self._servers.enter_context(stack.pop_all())
        return rt, proxy_url, note

    def submit(self, model: str, question: str, document: str, task: Any | None,
               live: LiveEpisode) -> tuple[concurrent.futures.Future[Outcome], str]:
        """Start one episode; `task` (with its gold) scores it. Returns its future and whether it runs on the token
        or the chat path. Raises `ServedError` for an unknown model or an endpoint that does not answer."""
        name, base = served(self.base_url, model)
        rt, proxy_url, note = self._base(base)
        fut = asyncio.run_coroutine_threadsafe(self._episode(rt, proxy_url, name, question, document, task, live),
                                               self.loop)
        return fut, note

    async def _episode(self, rt: Any, proxy_url: str, model: str, question: str, document: str, task: Any | None,
                       live: LiveEpisode) -> Outcome:
        from fathom.env_server.server.episode_core import resolve_limits, run_episode
        from fathom.protocol import EpisodeLimits, Sampling, SessionCreate

        es = rt.cfg.env_server
        limits = resolve_limits(es, EpisodeLimits(max_depth=es.demo_max_depth, max_turns=self.max_turns))
        sampling = Sampling(temperature=self.cfg.eval.temperature, max_tokens=self.cfg.trainer.max_completion_tokens)
        run = await run_episode(rt, question, document, limits=limits, turns=live.turns, proxy_url=proxy_url,
                                create=SessionCreate(trainable=False, sampling=sampling, model=model),
                                sampling=sampling, task=task, on_event=live.on_event, describe=error_text)
        if run.error is not None:
            return Outcome(None, "error", run.wall_s, run.llm_calls, run.total_tokens, error=run.error)
        if task is None:
            return Outcome(run.answer, run.stop_reason, run.wall_s, run.llm_calls, run.total_tokens,
                           reward_note="no expected answer was given")
        return Outcome(run.answer, run.stop_reason, run.wall_s, run.llm_calls, run.total_tokens,
                       reward=run.components, reward_note=run.verdict_error or "")

    def close(self) -> None:
        for fut in list(self._starts.values()):  # a start still running finishes first, so close stops what it made
            with contextlib.suppress(Exception):
                fut.result(timeout=self.start_timeout_s)
        self._starter.shutdown(wait=False, cancel_futures=True)
        with contextlib.suppress(Exception):
            self._servers.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
