"""Run a split's episodes through the env server, each in its own non-trainable proxy session.

The path is training's: capture proxy session -> `POST /episodes` -> harness -> verify in the env
server. The only differences are `trainable=false` (nothing becomes a training row, sampling may
be greedy) and a pinned model: the base, or an adapter eval loaded into vLLM.
"""

from __future__ import annotations

import concurrent.futures
import uuid
from dataclasses import dataclass
from typing import Callable

import httpx

from fathom.capture_proxy.client import ProxyClient, ProxyCallError
from fathom.env_server.client import EpisodeClient, EpisodeError
from fathom.protocol import EpisodeLimits, EpisodeRequest, EpisodeResult, Sampling, SessionCreate


class EvalError(RuntimeError):
    """Evaluation cannot run (proxy or env server unreachable, model not served); the message says what to do."""


@dataclass
class EvalTarget:
    """Where episodes run and which served model they sample."""

    env_url: str
    proxy_url: str
    model: str | None = None
    """Served name to pin (the base or a loaded adapter); None = whatever `policy` resolves to now."""
    label: str = "model"


class EvalRunner:
    def __init__(self, target: EvalTarget, *, sampling: Sampling, limits: EpisodeLimits, concurrency: int = 8,
                 timeout_s: float = 3600.0):
        self.t = target
        self.sampling, self.limits = sampling, limits
        self.concurrency, self.timeout_s = concurrency, timeout_s
        self.run_id = uuid.uuid4().hex[:8]
        self._closer: concurrent.futures.Executor | None = None

    def _open(self, proxy: ProxyClient, task_id: str) -> str:
        spec = SessionCreate(trainable=False, sampling=self.sampling, model=self.t.model,
                             metadata={"eval": self.run_id, "label": self.t.label, "task_id": task_id})
        try:
            return proxy.open_session(spec).session_id
        except ProxyCallError as e:
            if e.status == 404:
                raise EvalError(f"the capture proxy at {self.t.proxy_url} cannot pin model {self.t.model!r}: "
                                f"{e.detail}") from None
            if e.status is None:
                raise
            raise EpisodeError(f"POST /sessions on the proxy answered {e.status}: {e.body[:300]}") from None

    def _proxy(self, **kw) -> ProxyClient:
        return ProxyClient(self.t.proxy_url, timeout_s=30, **kw)

    def preflight(self) -> None:
        """Fail before the first episode when a server is down or the model is not served."""
        with self._proxy() as proxy:
            checks = (("capture proxy", self.t.proxy_url, proxy.health),
                      ("env server", self.t.env_url, lambda: httpx.get(self.t.env_url.rstrip("/") + "/health",
                                                                     timeout=10).raise_for_status()))
            for name, url, check in checks:
                try:
                    check()
                except (httpx.HTTPError, ProxyCallError) as e:
                    raise EvalError(f"{name} at {url} is not answering ({e.__cause__ or e}); start it, or let "
                                    "`fathom eval` start the stack from a config (--start)") from None
            proxy.close_session(self._open(proxy, "preflight"))

    def run_one(self, task_id: str, proxy: ProxyClient | None = None, env: EpisodeClient | None = None) -> EpisodeResult:
        """One episode; any infrastructure failure comes back as an unscorable result, never raised."""
        if proxy is None or env is None:
            with self._proxy() as p, EpisodeClient(self.t.env_url) as e:
                return self.run_one(task_id, p, e)
        # Unique per call: a runner reused (the watcher, a benchmark's rounds) must not collide with its earlier ids.
        eid = f"eval-{self.run_id}-{self.t.label}-{task_id}-{uuid.uuid4().hex[:6]}"
        sid = None
        try:
            sid = self._open(proxy, task_id)
            try:
                req = EpisodeRequest(episode_id=eid, task_id=task_id, session_id=sid, proxy_url=self.t.proxy_url,
                                     limits=self.limits, sampling=self.sampling,
                                     metadata={"eval": self.run_id, "label": self.t.label})
                res = env.run(req, timeout_s=self.timeout_s)
            finally:
                if self._closer is not None:  # off the episode's slot, so the next episode starts at once
                    self._closer.submit(self._close, proxy, sid)
                else:
                    self._close(proxy, sid)
        except EvalError:
            raise
        except (EpisodeError, ProxyCallError, httpx.HTTPError, ValueError) as e:
            return EpisodeResult(episode_id=eid, task_id=task_id, session_id=sid, status="error", stop_reason="error",
                                 error=f"evaluation could not run the episode: {e}")
        if res.status not in ("done", "error"):  # still running after timeout_s: no verdict, so unscorable
            res = res.model_copy(update={"status": "error", "stop_reason": "error", "reward": None,
                                         "error": f"episode still {res.status} after {self.timeout_s:g} s"})
        return res

    @staticmethod
    def _close(proxy: ProxyClient, sid: str) -> None:
        try:
            proxy.close_session(sid)
        except ProxyCallError:
            pass  # an unclosed eval session is evicted by the proxy's idle TTL; the episode's result stands

    def run(self, task_ids: list[str], on_result: Callable[[EpisodeResult], None] | None = None) -> list[EpisodeResult]:
        """All tasks, `concurrency` at a time; results in task order."""
        self.preflight()
        out: dict[str, EpisodeResult] = {}
        # One client each, shared by the threads (httpx clients are thread-safe): a client per episode
        # costs a TLS context and a TCP connect each, which showed up as eval overhead on 2 cores.
        limits = httpx.Limits(max_connections=2 * self.concurrency, max_keepalive_connections=2 * self.concurrency)
        with self._proxy(limits=limits) as proxy, \
                EpisodeClient(self.t.env_url) as env, concurrent.futures.ThreadPoolExecutor(self.concurrency) as pool, \
                concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="eval-close") as closer:
            self._closer = closer
            futs = {pool.submit(self.run_one, t, proxy, env): t for t in task_ids}
            try:
                for fut in concurrent.futures.as_completed(futs):
                    res = fut.result()
                    out[futs[fut]] = res
                    if on_result:
                        on_result(res)
            except BaseException:
                for f in futs:
                    f.cancel()
                raise
            finally:
                pool.shutdown(wait=True)
                self._closer = None  # closer's exit waits for the queued closes
        return [out[t] for t in task_ids]
