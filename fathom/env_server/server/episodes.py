"""The episode runner behind `POST /episodes` and `GET /episodes/{id}`.

An episode runs as an asyncio task: resolve the task, open (or join) the capture session,
run the harness loop, then verify inside the env server. Infrastructure failures make the
episode unscorable (status `error`, reward None), never a 0.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import HTTPException

from fathom.env_server.server.harness import Harness, Limits, LoopOutcome, Tally, Unscorable
from fathom.env_server.server.llm_bridge import ProxyClient, ProxyError
from fathom.protocol import EpisodeLimits, EpisodeRequest, EpisodeResult, SessionCreate

if TYPE_CHECKING:
    from fathom.env_server.server.runtime import Runtime

log = logging.getLogger(__name__)


def resolve_limits(cfg: Any, req: EpisodeLimits, max_turns_default: int | None = None) -> Limits:
    return Limits(
        max_turns=req.max_turns or max_turns_default or cfg.max_turns,
        max_depth=cfg.max_depth if req.max_depth is None else req.max_depth,
        max_subcalls=cfg.max_subcalls if req.max_subcalls is None else req.max_subcalls,
        max_tokens=req.max_tokens or cfg.max_tokens,
        wall_clock_s=req.wall_clock_s or cfg.wall_clock_s,
    )


def load_task(task_id: str | None, family: str | None, seed: int | None, length: int | None) -> Any:
    """Task by id, or by family + seed + length. Unknown -> 404, under-specified -> 422 (both name the input)."""
    from fathom import tasks

    if task_id is not None:
        if family is not None or seed is not None or length is not None:
            raise HTTPException(422, "give either task_id, or family + seed + length, not both")
        try:
            return tasks.get_task(task_id)
        except KeyError as e:  # tasks' message names the id and the expected form
            raise HTTPException(404, str(e.args[0]) if e.args else f"unknown task id {task_id!r}") from None
    missing = [n for n, v in (("family", family), ("seed", seed), ("length", length)) if v is None]
    if missing:
        raise HTTPException(
            422, f"no task named: give task_id, or family + seed + length (missing: {', '.join(missing)})"
        )
    if family not in tasks.FAMILIES:
        raise HTTPException(404, f"unknown task family {family!r}; choose one of {', '.join(tasks.FAMILIES)}")
    try:
        return tasks.generate(family, seed, length)
    except ValueError as e:
        raise HTTPException(422, f"cannot generate task family={family!r} seed={seed} length={length}: {e}") from None


@dataclass
class _Entry:
    result: EpisodeResult
    done: asyncio.Event = field(default_factory=asyncio.Event)
    finished_at: float | None = None
    task: asyncio.Task | None = None


class EpisodeManager:
    def __init__(self, rt: "Runtime"):
        self.rt = rt
        self.entries: dict[str, _Entry] = {}
        self.slots = asyncio.Semaphore(rt.cfg.env_server.max_concurrent_envs)

    def _purge(self) -> None:
        horizon = time.monotonic() - self.rt.cfg.env_server.result_retention_s
        for k in [k for k, e in self.entries.items() if e.finished_at is not None and e.finished_at < horizon]:
            del self.entries[k]

    async def submit(self, req: EpisodeRequest) -> EpisodeResult:
        self._purge()
        episode_id = req.episode_id or uuid.uuid4().hex
        cap = self.rt.depth_cap
        if req.limits.max_depth is not None and req.limits.max_depth > cap:
            raise HTTPException(422, f"limits.max_depth {req.limits.max_depth} exceeds this server's cap {cap} "
                                     "(max(env_server.max_depth, env_server.demo_max_depth)); lower it")
        if episode_id in self.entries:
            raise HTTPException(409, f"episode id {episode_id!r} already exists; choose a new episode_id")
        loop = asyncio.get_running_loop()
        # Resolve before answering so an unknown task is a 404 on this request, not a failed episode later.
        task = await loop.run_in_executor(self.rt.executor, self.rt.load_task, req.task_id, req.family, req.seed,
                                          req.length)
        entry = _Entry(EpisodeResult(episode_id=episode_id, task_id=task.id, session_id=req.session_id,
                                     status="pending", metadata=req.metadata))
        self.entries[episode_id] = entry
        entry.task = asyncio.create_task(self._run(req, task, entry))
        return entry.result.model_copy()

    async def get(self, episode_id: str, wait_s: float = 0.0) -> EpisodeResult:
        entry = self.entries.get(episode_id)
        if entry is None:
            raise HTTPException(404, f"unknown episode id {episode_id!r}; start one with POST /episodes")
        if wait_s > 0 and not entry.done.is_set():
            try:
                await asyncio.wait_for(entry.done.wait(), wait_s)
            except asyncio.TimeoutError:
                pass
        return entry.result.model_copy()

    async def close(self) -> None:
        for e in self.entries.values():
            if e.task is not None and not e.task.done():
                e.task.cancel()
        await asyncio.gather(*(e.task for e in self.entries.values() if e.task), return_exceptions=True)

    async def _run(self, req: EpisodeRequest, task: Any, entry: _Entry) -> None:
        res = entry.result
        async with self.slots:
            res.status = "running"
            t0 = time.monotonic()
            try:
                await self._episode(req, task, res)
            except Exception as e:  # never leave an episode running after a bug: it is unscorable
                log.exception("episode %s failed", res.episode_id)
                res.status, res.stop_reason, res.reward, res.error = "error", "error", None, f"env server error: {e!r}"
            res.wall_s = time.monotonic() - t0
            entry.finished_at = time.monotonic()
            entry.done.set()

    async def _episode(self, req: EpisodeRequest, task: Any, res: EpisodeResult) -> None:
        rt, cfg = self.rt, self.rt.cfg.env_server
        limits = resolve_limits(cfg, req.limits)
        url = req.proxy_url or rt.default_proxy_url
        tally = Tally(limits=limits, deadline=time.monotonic() + limits.wall_clock_s)
        try:
            if req.session_id:
                proxy = ProxyClient(rt.http, url, req.session_id, cfg.proxy_timeout_s)
            else:
                create = SessionCreate(metadata={"episode_id": res.episode_id, "task_id": task.id} | req.metadata)
                if req.sampling is not None:
                    create.sampling = req.sampling
                proxy = await ProxyClient.open(rt.http, url, create, cfg.proxy_timeout_s)
                res.session_id = proxy.session_id
        except ProxyError as e:
            res.status, res.stop_reason, res.error = "error", "error", f"could not open a capture session: {e}"
            return
        harness = Harness(cfg=cfg, pool=rt.pool, executor=rt.executor_for, output_cap=rt.cfg.sandbox.output_cap_chars,
                          proxy=proxy, tally=tally, sampling=req.sampling, tokens=rt.tokens)
        try:
            out = await asyncio.wait_for(
                harness.run_loop(task.question, task.context, depth=0, parent=None,
                                 max_turns=limits.max_turns, turns=res.turns),
                timeout=limits.wall_clock_s,
            )
        except asyncio.TimeoutError:
            out = LoopOutcome(None, False, "timeout")
        except Unscorable as e:
            res.status, res.stop_reason, res.error, res.reward = "error", "error", str(e), None
            res.llm_calls, res.total_tokens = tally.subcalls, tally.tokens
            return
        res.answer, res.stop_reason, res.llm_calls = out.answer, out.stop_reason, tally.subcalls
        try:
            info = await proxy.session_info()
            res.total_tokens = info.total_tokens
        except ProxyError as e:
            res.status, res.error, res.reward, res.total_tokens = "error", f"could not read the session: {e}", None, tally.tokens
            return
        await self.verify(task, out, tally, res)

    async def verify(self, task: Any, out: LoopOutcome, tally: Tally, res: EpisodeResult) -> None:
        from fathom import tasks

        loop = asyncio.get_running_loop()
        try:
            comps = await loop.run_in_executor(
                self.rt.executor,
                lambda: tasks.score(task, out.answer, via_final=out.via_final, total_tokens=res.total_tokens,
                                    llm_calls=tally.subcalls, final_calls=tally.final_calls,
                                    cfg=self.rt.cfg.tasks.reward),
            )
        except Exception as e:  # a broken verifier must not turn into a 0
            res.status, res.error, res.reward = "error", f"verifier failed: {e!r}", None
            return
        res.reward_components, res.reward, res.status = comps, comps.total, "done"
