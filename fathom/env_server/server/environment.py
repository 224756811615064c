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

from fastapi import HTTPException
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from fathom.env_server.models import ENV_NAME, RLMAction, RLMObservation, RLMState
from fathom.env_server.server import prompts
from fathom.env_server.server.episodes import resolve_limits
from fathom.env_server.server.harness import Current, Harness, Tally, Unscorable
from fathom.env_server.server.llm_bridge import ProxyClient, ProxyError
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
            raise HTTPException(422, f"unknown reset field(s) {unknown}; accepted: {', '.join(_RESET_FIELDS)}")
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
            proxy = ProxyClient(self.rt.http, url, kwargs["session_id"], cfg.proxy_timeout_s)
        max_turns = kwargs.get("max_turns")
        if max_turns is not None and (not isinstance(max_turns, int) or max_turns < 1):
            raise HTTPException(422, f"max_turns must be a positive integer, got {max_turns!r}")
        limits = resolve_limits(cfg, EpisodeLimits(max_turns=max_turns))
        tally = Tally(limits=limits, deadline=float("inf"))
        harness = Harness(cfg=cfg, pool=self.rt.pool, executor=self.rt.executor_for,
                          output_cap=self.rt.cfg.sandbox.output_cap_chars, proxy=proxy, tally=tally,
                          tokens=self.rt.tokens)
        cur = Current()
        try:
            sandbox = await harness.new_sandbox(task.context, 0, cur)
        except Unscorable as e:
            raise HTTPException(503, str(e)) from None
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
            raise HTTPException(409, "no episode in this session: call reset first")
        raise HTTPException(
            422, "episode_id is required: HTTP /step is stateless, so pass the episode_id /reset returned "
            "(or use the /ws session)"
        )

    async def step_async(
        self, action: RLMAction, timeout_s: float | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> RLMObservation:
        ep = self._episode(episode_id)
        async with ep.lock:
            if ep.done:
                raise HTTPException(409, f"episode {ep.episode_id!r} is done ({ep.stop_reason}); reset to start another")
            ep.last_used = time.monotonic()
            turn = TurnStat(index=ep.turn, call_id=action.parent_call_id)
            ep.cur.turn = turn
            ep.turn += 1
            obs = RLMObservation(episode_id=ep.episode_id, task_id=ep.task.id, turn=ep.turn, max_turns=ep.max_turns)
            try:
                res = await ep.harness.run_code(ep.sandbox, action.code, turn)
            except Unscorable as e:
                ep.done, ep.stop_reason = True, "error"
                ep.close_soon()
                obs.done, obs.stop_reason, obs.error, obs.reward = True, "error", str(e), None
                return obs
            ep.llm_calls += len(turn.subcalls)
            obs.output, obs.error, obs.truncated = turn.outputs[-1], res.error, res.truncated
            obs.killed_reason, obs.llm_calls, obs.final_answer = res.killed_reason, len(turn.subcalls), res.final_answer
            obs.sandbox_ms = turn.sandbox_ms
            if res.final_answer is not None:
                ep.done, ep.stop_reason, ep.answer = True, "final", res.final_answer
                ep.harness.tally.final_calls += 1
            elif ep.turn >= ep.max_turns:
                ep.done, ep.stop_reason = True, "max_turns"
            if ep.done:
                ep.close_soon()
                await self._verify(ep, obs)
            obs.done, obs.stop_reason = ep.done, ep.stop_reason
            return obs

    async def _verify(self, ep: StepEpisode, obs: RLMObservation) -> None:
        from fathom import tasks

        tally = ep.harness.tally
        total_tokens = tally.tokens
        if ep.harness.proxy is not None:
            try:
                total_tokens = (await ep.harness.proxy.session_info()).total_tokens
            except ProxyError as e:
                ep.stop_reason, obs.error = "error", f"could not read the capture session: {e}"
                return
        loop = asyncio.get_running_loop()
        try:
            comps = await loop.run_in_executor(
                self.rt.executor,
                lambda: tasks.score(ep.task, ep.answer, via_final=ep.answer is not None, total_tokens=total_tokens,
                                    llm_calls=tally.subcalls, final_calls=tally.final_calls,
                                    cfg=self.rt.cfg.tasks.reward),
            )
        except Exception as e:  # a broken verifier is unscorable, not 0
            ep.stop_reason, obs.error = "error", f"verifier failed: {e!r}"
            return
        ep.components = comps
        obs.reward, obs.reward_components = comps.total, comps.model_dump()

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
