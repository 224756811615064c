"""The episode runner behind `POST /episodes`, `GET /episodes/{id}` and `DELETE /episodes/{id}`.

An episode runs as an asyncio task: resolve the task, open (or join) the capture session,
run the harness loop, then verify inside the env server. Infrastructure failures make the
episode unscorable (status `error`, reward None), never a 0. So does a cancel: its client
gave up on it (a stopping rollout worker), and its task is cancelled at once, so the model
call it was waiting on and its sandbox are let go instead of running to the next turn.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fathom.env_server.server.episode_core import resolve_limits, run_episode
from fathom.env_server.server.errors import Conflict, InvalidRequest, NotFound
from fathom.protocol import EpisodeRequest, EpisodeResult, SessionCreate

if TYPE_CHECKING:
    from fathom.env_server.server.runtime import Runtime

log = logging.getLogger(__name__)


def load_task(task_id: str | None, family: str | None, seed: int | None, length: int | None) -> Any:
    """Task by id, or by family + seed + length. Unknown -> NotFound, under-specified -> InvalidRequest."""
    from fathom import tasks

    if task_id is not None:
        if family is not None or seed is not None or length is not None:
            raise InvalidRequest("give either task_id, or family + seed + length, not both")
        try:
            return tasks.get_task(task_id)
        except KeyError as e:  # tasks' message names the id and the expected form
            raise NotFound(str(e.args[0]) if e.args else f"unknown task id {task_id!r}") from None
        except ValueError as e:  # an imported task whose pinned manifest or stored context changed on disk
            raise Conflict(str(e)) from None
    missing = [n for n, v in (("family", family), ("seed", seed), ("length", length)) if v is None]
    if missing:
        raise InvalidRequest(f"no task named: give task_id, or family + seed + length (missing: {', '.join(missing)})")
    if family not in tasks.FAMILIES:
        raise NotFound(f"unknown task family {family!r}; choose one of {', '.join(tasks.FAMILIES)}")
    try:
        return tasks.generate(family, seed, length)
    except ValueError as e:
        raise InvalidRequest(f"cannot generate task family={family!r} seed={seed} length={length}: {e}") from None


@dataclass
class _Entry:
    result: EpisodeResult
    done: asyncio.Event = field(default_factory=asyncio.Event)
    finished_at: float | None = None
    task: asyncio.Task | None = None
    cancelled_by: str = "the env server shutting down"

    def mark_cancelled(self) -> None:
        res = self.result
        res.status, res.stop_reason, res.reward, res.reward_components = "error", "cancelled", None, None
        res.error = f"cancelled by {self.cancelled_by}"

    def finish(self) -> None:
        """The result is final: start its retention clock and answer every waiting GET."""
        self.finished_at = time.monotonic()
        self.done.set()


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
            raise InvalidRequest(f"limits.max_depth {req.limits.max_depth} exceeds this server's cap {cap} "
                                 "(max(env_server.max_depth, env_server.demo_max_depth)); lower it")
        if episode_id in self.entries:
            raise Conflict(f"episode id {episode_id!r} already exists; choose a new episode_id")
        if req.session_id:
            # Two episodes recording into one capture session would interleave their turns into one broken trace.
            other = next((k for k, e in self.entries.items() if e.result.session_id == req.session_id), None)
            if other is not None:
                raise Conflict(f"session id {req.session_id!r} is already used by episode {other!r}; "
                               "open a new capture-proxy session for each episode")
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
            raise NotFound(f"unknown episode id {episode_id!r}; start one with POST /episodes")
        if wait_s > 0 and not entry.done.is_set():
            try:
                await asyncio.wait_for(entry.done.wait(), wait_s)
            except asyncio.TimeoutError:
                pass
        return entry.result.model_copy()

    async def cancel(self, episode_id: str) -> EpisodeResult:
        """End a pending or running episode now (stop reason `cancelled`, unscorable) and return its result; a
        finished one is returned as it is."""
        entry = self.entries.get(episode_id)
        if entry is None:
            raise NotFound(f"unknown episode id {episode_id!r}; start one with POST /episodes")
        if entry.task is not None and not entry.task.done():
            entry.cancelled_by = "its client (DELETE /episodes/{id})"
            entry.task.cancel()
            await asyncio.gather(entry.task, return_exceptions=True)
            if not entry.done.is_set():  # cancelled before its first step: _run never ran
                entry.mark_cancelled()
                entry.finish()
        return entry.result.model_copy()

    async def close(self) -> None:
        for e in self.entries.values():
            if e.task is not None and not e.task.done():
                e.task.cancel()
        await asyncio.gather(*(e.task for e in self.entries.values() if e.task), return_exceptions=True)

    async def _run(self, req: EpisodeRequest, task: Any, entry: _Entry) -> None:
        res = entry.result
        t0 = time.monotonic()
        try:
            async with self.slots:
                res.status = "running"
                t0 = time.monotonic()
                try:
                    await self._episode(req, task, res)
                except Exception as e:  # never leave an episode running after a bug: it is unscorable
                    log.exception("episode %s failed", res.episode_id)
                    res.status, res.stop_reason, res.reward = "error", "error", None
                    res.error = f"env server error: {e!r}"
        except asyncio.CancelledError:  # waiters on GET still get an answer
            entry.mark_cancelled()
            raise
        finally:
            res.wall_s = time.monotonic() - t0
            entry.finish()

    async def _episode(self, req: EpisodeRequest, task: Any, res: EpisodeResult) -> None:
        rt = self.rt
        create = SessionCreate(metadata={"episode_id": res.episode_id, "task_id": task.id} | req.metadata)
        if req.sampling is not None:
            create.sampling = req.sampling

        def opened(session_id: str) -> None:
            res.session_id = session_id

        run = await run_episode(rt, task.question, task.context, limits=resolve_limits(rt.cfg.env_server, req.limits),
                                turns=res.turns, proxy_url=req.proxy_url or rt.default_proxy_url,
                                session_id=req.session_id, create=create, sampling=req.sampling, task=task,
                                on_session=opened)
        res.llm_calls, res.total_tokens = run.llm_calls, run.total_tokens
        if run.error is not None:  # no session, or the loop's infrastructure failed: unscorable
            res.status, res.stop_reason, res.error, res.reward = "error", "error", run.error, None
            return
        res.answer, res.stop_reason = run.answer, run.stop_reason
        if run.components is None:
            res.status, res.error, res.reward = "error", run.verdict_error, None
            return
        res.reward_components, res.reward, res.status = run.components, run.components.total, "done"
