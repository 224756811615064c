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
import copy
import threading
import time
from typing import Any

from fathom.config import FathomConfig
from fathom.entrypoints.served import list_models, served, token_path
from fathom.ui.live import LiveEpisode
from fathom.ui.tree import Outcome


class Backend:
    def __init__(self, cfg: FathomConfig, base_url: str, *, tokenizer: str | None = None, max_turns: int | None = None):
        self.cfg, self.base_url, self.tokenizer = cfg, base_url.rstrip("/"), tokenizer
        self.max_turns = max_turns or cfg.env_server.max_turns
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fathom-ui-episodes", daemon=True)
        self._thread.start()
        self._servers = contextlib.ExitStack()
        self._bases: dict[str, tuple[Any, str, str]] = {}
        """base model -> (Runtime, proxy URL, path note)."""
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
        """The Runtime and proxy for `base`, started on first use (blocking; call outside the loop)."""
        with self._start_lock:
            if base in self._bases:
                return self._bases[base]
            from fathom.capture_proxy.app import create_app
            from fathom.entrypoints.common import serve_in_thread
            from fathom.env_server.server.runtime import Runtime

            cfg = copy.deepcopy(self.cfg)
            tokenizer_dir, note = token_path(self.base_url, base, self.tokenizer)
            cfg.env_server.prompt_format = "tokens" if tokenizer_dir else "chat"
            cfg.env_server.tokenizer = tokenizer_dir or ""
            app = create_app(cfg.capture_proxy, upstream_url=self.base_url, base_model=base, weight_sync="merged")
            proxy_url = self._servers.enter_context(serve_in_thread(app))
            cfg.env_server.proxy_url = proxy_url  # the token path checks its template against this engine at start
            rt = Runtime(cfg)
            asyncio.run_coroutine_threadsafe(rt.start(), self.loop).result(timeout=120)
            self._bases[base] = (rt, proxy_url, note)
            return self._bases[base]

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
        from fathom.env_server.server.episode_core import build_harness, resolve_limits, verify
        from fathom.env_server.server.harness import LoopOutcome, Unscorable
        from fathom.env_server.server.llm_bridge import ProxyClient, ProxyError
        from fathom.protocol import EpisodeLimits, Sampling, SessionCreate

        es, t0 = rt.cfg.env_server, time.perf_counter()
        limits = resolve_limits(es, EpisodeLimits(max_depth=es.demo_max_depth, max_turns=self.max_turns))
        sampling = Sampling(temperature=self.cfg.eval.temperature, max_tokens=self.cfg.trainer.max_completion_tokens)
        try:
            proxy = await ProxyClient.open(rt.http, proxy_url, SessionCreate(trainable=False, sampling=sampling,
                                                                             model=model), es.proxy_timeout_s)
        except ProxyError as e:
            return Outcome(None, "error", time.perf_counter() - t0, 0, 0, error=f"could not open a capture session: {e}")
        harness = build_harness(rt, limits, proxy, sampling, on_event=live.on_event)
        tally = harness.tally
        try:
            out = await asyncio.wait_for(harness.run_loop(question, document, depth=0, parent=None,
                                                          max_turns=limits.max_turns, turns=live.turns),
                                         timeout=max(tally.remaining_s(), 0.0))
        except asyncio.TimeoutError:
            out = LoopOutcome(None, False, "timeout")
        except Unscorable as e:
            return Outcome(None, "error", time.perf_counter() - t0, tally.subcalls, tally.tokens, error=str(e))
        wall = time.perf_counter() - t0
        if task is None:
            try:
                total = (await proxy.session_info()).total_tokens
            except ProxyError:
                total = tally.tokens
            return Outcome(out.answer, out.stop_reason, wall, tally.subcalls, total,
                           reward_note="no expected answer was given")
        verdict = await verify(rt, task, out.answer, via_final=out.via_final, harness=harness)
        return Outcome(out.answer, out.stop_reason, wall, tally.subcalls, verdict.total_tokens,
                       reward=verdict.components, reward_note=verdict.error or "")

    def close(self) -> None:
        for rt, _, _ in self._bases.values():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(rt.stop(), self.loop).result(timeout=30)
        self._servers.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
