"""The OpenEnv environment: reset to a task, step with code, reward when done.

Over WebSocket (`/ws`, what OpenEnv clients use) each session owns one environment
instance and its episode. OpenEnv's HTTP `/reset` and `/step` build a fresh instance per
request, so an episode started over HTTP lives in the runtime's `StepStore`
(step_episodes.py) and later `/step` calls name it by `episode_id`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING, Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from fathom.capture_proxy.client import ProxySession
from fathom.env_server.models import ENV_NAME, RLMAction, RLMObservation, RLMState
from fathom.env_server.server import prompts
from fathom.env_server.server.episode_core import build_harness, resolve_limits, verify
from fathom.env_server.server.errors import Conflict, InvalidRequest, Unavailable
from fathom.env_server.server.harness import Current, Unscorable
from fathom.env_server.server.step_episodes import StepEpisode
from fathom.protocol import EpisodeLimits, TurnStat

if TYPE_CHECKING:
    from fathom.env_server.server.runtime import Runtime

_RESET_FIELDS = ("task_id", "family", "seed", "length", "episode_id", "proxy_url", "session_id", "max_turns")


class RLMEnvironment(Environment[RLMAction, RLMObservation, RLMState]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, runtime: "Runtime"):
        super().__init__()
        self.rt = runtime
        self.session_owned = False
        """True for a WebSocket session's instance (it owns its episode); False for a per-request HTTP one."""
        self._ep: StepEpisode | None = None

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name=ENV_NAME,
            description="Recursive Language Model environment: a long document lives in a sandboxed Python REPL "
            "as `context`; the agent writes code, calls llm() on pieces and answers with FINAL(...).",
            version="0.1.0",
        )

    # --- reset ----------------------------------------------------------------------------

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> RLMObservation:
        unknown = sorted(set(kwargs) - set(_RESET_FIELDS))
        if unknown:
            raise InvalidRequest(f"unknown reset field(s) {unknown}; accepted: {', '.join(_RESET_FIELDS)}")
        cfg = self.rt.cfg.env_server
        task_id, family, length = kwargs.get("task_id"), kwargs.get("family"), kwargs.get("length")
        loop = asyncio.get_running_loop()
        if task_id is None and family is None and length is None:
            task_id = await loop.run_in_executor(self.rt.executor, _train_task_id, seed or 0)
            seed = None
        task = await loop.run_in_executor(self.rt.executor, self.rt.load_task, task_id, family, seed, length)
        proxy = None
        if kwargs.get("session_id"):
            url = kwargs.get("proxy_url") or self.rt.default_proxy_url
            proxy = ProxySession(self.rt.http, url, kwargs["session_id"], cfg.proxy_timeout_s)
        max_turns = kwargs.get("max_turns")
        if max_turns is not None and (not isinstance(max_turns, int) or max_turns < 1):
            raise InvalidRequest(f"max_turns must be a positive integer, got {max_turns!r}")
        limits = resolve_limits(cfg, EpisodeLimits(max_turns=max_turns))
        # The same set-up as /episodes, wall clock included: it starts now and bounds every step.
        harness = build_harness(self.rt, limits, proxy)
        cur = Current()
        try:
            sandbox = await harness.new_sandbox(task.context, task.question, 0, cur)
        except Unscorable as e:
            raise Unavailable(f"{e}; retry later") from None
        ep = StepEpisode(episode_id or uuid.uuid4().hex, task, sandbox, harness, cur, limits.max_turns)
        if self.session_owned:
            if self._ep is not None:
                self._ep.close_soon()
            self._ep = ep
        else:
            self.rt.step_store.put(ep)
        return RLMObservation(
            episode_id=ep.episode_id, task_id=task.id, question=task.question, context_chars=len(task.context),
            preview=prompts.preview(task.context, cfg.preview_chars),
            messages=prompts.initial_messages(task.question, task.context, cfg.preview_chars),
            turn=0, max_turns=ep.max_turns,
        )

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> RLMObservation:
        raise NotImplementedError("RLMEnvironment is async: the OpenEnv server calls reset_async")

    # --- step -----------------------------------------------------------------------------

    def _episode(self, episode_id: str | None) -> StepEpisode:
        if episode_id is not None:
            if self._ep is not None and self._ep.episode_id == episode_id:
                return self._ep
            return self.rt.step_store.get(episode_id)
        if self._ep is not None:
            return self._ep
        if self.session_owned:
            raise Conflict("no episode in this session: call reset first")
        raise InvalidRequest(
            "episode_id is required: HTTP /step is stateless, so pass the episode_id /reset returned "
            "(or use the /ws session)"
        )

    async def step_async(
        self, action: RLMAction, timeout_s: float | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> RLMObservation:
        ep = self._episode(episode_id)
        async with ep.lock:
            if ep.done:
                raise Conflict(f"episode {ep.episode_id!r} is done ({ep.stop_reason}); reset to start another")
            ep.last_used = time.monotonic()
            obs = RLMObservation(episode_id=ep.episode_id, task_id=ep.task.id, turn=ep.turn, max_turns=ep.max_turns)
            tally = ep.harness.tally
            if tally.remaining_s() <= 0:
                return await self._finish(ep, obs, "timeout")
            turn = TurnStat(index=ep.turn, call_id=action.parent_call_id, code_blocks=[action.code])
            ep.cur.turn = turn
            ep.turn += 1
            obs.turn = ep.turn
            try:
                end = await asyncio.wait_for(ep.harness.take_turn(ep.sandbox, turn, ep.max_turns - ep.turn),
                                             timeout=tally.remaining_s())
            except asyncio.TimeoutError:
                obs.error = f"the episode's wall clock ({tally.limits.wall_clock_s:g} s, env_server.wall_clock_s) ran out"
                return await self._finish(ep, obs, "timeout")
            except Unscorable as e:
                ep.done, ep.stop_reason = True, "error"
                ep.close_soon()
                obs.done, obs.stop_reason, obs.error, obs.reward = True, "error", str(e), None
                return obs
            res = end.last
            ep.llm_calls += len(turn.subcalls)
            obs.output, obs.error, obs.truncated = turn.outputs[-1], res.error, res.truncated
            obs.killed_reason, obs.llm_calls, obs.final_answer = res.killed_reason, len(turn.subcalls), res.final_answer
            obs.sandbox_ms = turn.sandbox_ms
            if end.answer is not None:
                ep.answer = end.answer
                return await self._finish(ep, obs, "final")
            if ep.turn >= ep.max_turns:
                return await self._finish(ep, obs, "max_turns")
            return obs

    async def _finish(self, ep: StepEpisode, obs: RLMObservation, stop_reason: str) -> RLMObservation:
        """End the episode: free its sandbox, then score it the way /episodes does."""
        ep.done, ep.stop_reason = True, stop_reason
        ep.close_soon()
        verdict = await verify(self.rt, ep.task, ep.answer, via_final=ep.answer is not None, harness=ep.harness)
        if verdict.components is None:
            ep.stop_reason, obs.error = "error", verdict.error
        else:
            ep.components = verdict.components
            obs.reward, obs.reward_components = verdict.components.total, verdict.components.model_dump()
        obs.done, obs.stop_reason = True, ep.stop_reason
        return obs

    def step(self, action: RLMAction, timeout_s: float | None = None, **kwargs: Any) -> RLMObservation:
        raise NotImplementedError("RLMEnvironment is async: the OpenEnv server calls step_async")

    # --- state / close ----------------------------------------------------------------------

    @property
    def state(self) -> RLMState:
        ep = self._ep
        if ep is None:
            return RLMState()
        return RLMState(
            episode_id=ep.episode_id, step_count=ep.turn, task_id=ep.task.id, done=ep.done,
            stop_reason=ep.stop_reason, final_answer=ep.answer, llm_calls=ep.llm_calls, max_turns=ep.max_turns,
        )

    def close(self) -> None:
        if self.session_owned and self._ep is not None:
            self._ep.close()
            self._ep = None


def _train_task_id(index: int) -> str:
    """reset() without a task: the train split's task at `seed` (mod its size), so bare OpenEnv clients get one."""
    from fathom import tasks

    ids = tasks.load_split("train")
    return ids[index % len(ids)]
