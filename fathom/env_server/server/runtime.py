"""What every request shares: config, the sandbox pool, the thread pool for sandbox runs, the HTTP client."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from typing import Any, Callable

import httpx

from fathom.capture_proxy.client import ProxyCallError, ProxySession
from fathom.config import FathomConfig
from fathom.env_server.server.step_episodes import StepStore
from fathom.env_server.server.episodes import EpisodeManager, load_task
from fathom.env_server.server.task_cache import TaskCache
from fathom.env_server.server.tokens import ChatTokens, TokenPath
from fathom.protocol import token_headers

log = logging.getLogger(__name__)


def _default_pool(cfg: FathomConfig) -> Any:
    from fathom.env_server.sandbox import SandboxPool

    return SandboxPool(cfg.sandbox)


class Runtime:
    def __init__(self, cfg: FathomConfig, pool_factory: Callable[[FathomConfig], Any] | None = None,
                 tokenizer_dir: str | None = None):
        self.cfg = cfg
        es = cfg.env_server
        self.tokenizer_dir = es.tokenizer or tokenizer_dir
        self.tokens: TokenPath | None = None
        """The token path, loaded at start (None when prompt_format is chat)."""
        # A sandbox run blocks its thread; runs of depth d wait on runs of depth d + 1, so each depth
        # gets its own pool (threads start lazily; the caps only bound them).
        self.depth_cap = max(es.max_depth, es.demo_max_depth)
        self.executor = concurrent.futures.ThreadPoolExecutor(
            # root runs of /episodes, WebSocket sessions and HTTP-started episodes, plus task loading and scoring
            max_workers=3 * es.max_concurrent_envs + 16, thread_name_prefix="fathom-env-d0"
        )
        self._nested: dict[int, concurrent.futures.ThreadPoolExecutor] = {}
        self._nested_lock = threading.Lock()
        self._pool_factory = pool_factory or _default_pool
        self.pool: Any = None
        self.http: httpx.AsyncClient | None = None
        self.episodes: EpisodeManager | None = None
        self.step_store = StepStore(es.max_concurrent_envs, es.http_episode_idle_s, es.result_retention_s)
        self.tasks = TaskCache(es.task_cache_chars)
        from fathom import tasks

        tasks.configure(cfg.tasks)  # imported ids resolve from cfg.tasks.store_dir, as in the trainer and evaluator

    def load_task(self, task_id: str | None, family: str | None, seed: int | None, length: int | None) -> Any:
        """`episodes.load_task` through the cache (blocking: call it in the executor)."""
        return self.tasks.get((task_id, family, seed, length), lambda: load_task(task_id, family, seed, length))

    def executor_for(self, depth: int) -> concurrent.futures.ThreadPoolExecutor:
        """The thread pool for sandbox work of episodes at `depth` (0: root episodes and everything else)."""
        if depth == 0:
            return self.executor
        with self._nested_lock:
            ex = self._nested.get(depth)
            if ex is None:
                es = self.cfg.env_server
                ex = self._nested[depth] = concurrent.futures.ThreadPoolExecutor(
                    max_workers=es.max_concurrent_envs * es.llm_batch_concurrency,
                    thread_name_prefix=f"fathom-env-d{depth}",
                )
            return ex

    @property
    def default_proxy_url(self) -> str:
        return self.cfg.proxy_url

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.pool = await loop.run_in_executor(self.executor, self._pool_factory, self.cfg)
        n = self.cfg.env_server.max_concurrent_envs * 4
        # Every call to the proxy (harness turns, llm() sub-calls, /tokenize) carries the shared token when set.
        self.http = httpx.AsyncClient(limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
                                      headers=token_headers(self.cfg.token()))
        self.episodes = EpisodeManager(self)
        if self.cfg.env_server.prompt_format == "tokens":
            await self._start_tokens()

    async def _start_tokens(self) -> None:
        """Load the served model's tokenizer, and refuse to start when the default proxy's engine disagrees."""
        if not self.tokenizer_dir:
            raise ValueError("env_server.prompt_format is 'tokens' but no tokenizer is known: set env_server.tokenizer "
                             "to the served model's directory (`fathom env serve` resolves it from model.name)")
        chat = await asyncio.get_running_loop().run_in_executor(self.executor, ChatTokens.load, self.tokenizer_dir)
        self.tokens = TokenPath(chat)
        assert self.http is not None
        probe = ProxySession(self.http, self.default_proxy_url, "", 30.0)
        try:
            await self.tokens.ensure(probe)
        except ProxyCallError as e:  # the proxy may start after us; the first episode on each proxy checks again
            log.warning("chat template not yet checked against the engine (%s); the first episode will", e)

    async def stop(self) -> None:
        if self.episodes is not None:
            await self.episodes.close()
        self.step_store.close()
        if self.http is not None:
            await self.http.aclose()
        if self.pool is not None:
            self.pool.close()
        for ex in [self.executor, *self._nested.values()]:
            ex.shutdown(wait=False, cancel_futures=True)
