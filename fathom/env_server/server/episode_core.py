"""Running an episode, one way for every caller: set-up (limits, tally with its wall clock, harness),
the root loop under the wall clock, and verification (session tokens, then the task's scorer).

`run_episode` is the whole episode: the env server's `/episodes` (episodes.py), `fathom ask` and `fathom ui`
call it. Step mode (environment.py) runs one action per `step` through the harness's own turn function, and
builds and scores its episode here too, so a limit or a scoring rule cannot differ between them.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from fathom.capture_proxy.client import ProxyCallError, ProxySession
from fathom.env_server.server.harness import EventHook, Harness, Limits, LoopOutcome, Tally, Unscorable
from fathom.protocol import EpisodeLimits, RewardComponents, Sampling, SessionCreate, StopReason, TurnStat

if TYPE_CHECKING:
    from fathom.env_server.server.runtime import Runtime


def resolve_limits(cfg: Any, req: EpisodeLimits, max_turns_default: int | None = None) -> Limits:
    return Limits(
        max_turns=req.max_turns or max_turns_default or cfg.max_turns,
        max_depth=cfg.max_depth if req.max_depth is None else req.max_depth,
        max_subcalls=cfg.max_subcalls if req.max_subcalls is None else req.max_subcalls,
        max_tokens=req.max_tokens or cfg.max_tokens,
        wall_clock_s=req.wall_clock_s or cfg.wall_clock_s,
    )


def build_harness(rt: "Runtime", limits: Limits, proxy: ProxySession | None, sampling: Sampling | None = None,
                  on_event: EventHook | None = None) -> Harness:
    """The episode's harness, its tally's wall clock started now (both modes get the same limit).
    `on_event` sees the tree grow (a live view); see `harness.EventHook`."""
    tally = Tally(limits=limits, deadline=time.monotonic() + limits.wall_clock_s)
    return Harness(cfg=rt.cfg.env_server, pool=rt.pool, executor=rt.executor_for,
                   output_cap=rt.cfg.sandbox.output_cap_chars, proxy=proxy, tally=tally, sampling=sampling,
                   tokens=rt.tokens, on_event=on_event)


@dataclass
class Verdict:
    components: RewardComponents | None
    """None when the episode is unscorable; `error` then says why."""
    total_tokens: int
    error: str | None = None


async def verify(rt: "Runtime", task: Any, answer: str | None, *, via_final: bool, harness: Harness) -> Verdict:
    """Score the episode inside the env server. A session that cannot be read or a verifier that
    raises makes it unscorable (components None), never a 0."""
    from fathom import tasks

    tally = harness.tally
    total_tokens = tally.tokens
    if harness.proxy is not None:
        try:
            total_tokens = (await harness.proxy.session_info()).total_tokens
        except ProxyCallError as e:
            return Verdict(None, tally.tokens, f"could not read the capture session: {e}")
    loop = asyncio.get_running_loop()
    try:
        comps = await loop.run_in_executor(
            rt.executor,
            lambda: tasks.score(task, answer, via_final=via_final, total_tokens=total_tokens,
                                llm_calls=tally.subcalls, final_calls=tally.final_calls, cfg=rt.cfg.tasks.reward),
        )
    except Exception as e:  # noqa: BLE001 - a broken verifier must not turn into a 0
        return Verdict(None, total_tokens, f"verifier failed: {e!r}")
    return Verdict(comps, total_tokens)


@dataclass
class EpisodeRun:
    """What one `run_episode` came to. `error`: the episode failed (no session, or infrastructure in the loop),
    so it is unscorable and has no answer. `verdict_error`: it ran, but its answer could not be scored. Either
    way there is no reward (None, never 0)."""

    answer: str | None = None
    stop_reason: StopReason = "error"
    llm_calls: int = 0
    total_tokens: int = 0
    components: RewardComponents | None = None
    error: str | None = None
    verdict_error: str | None = None
    timed_out: bool = False
    """The wall clock stopped the loop from outside (stop reason `timeout`)."""
    wall_s: float = 0.0
    """From opening the session to the loop's end (verification excluded)."""


async def run_episode(rt: "Runtime", question: str, context: str, *, limits: Limits, turns: list[TurnStat],
                      proxy_url: str, session_id: str | None = None, create: SessionCreate | None = None,
                      sampling: Sampling | None = None, task: Any | None = None, on_event: EventHook | None = None,
                      on_session: Callable[[str], None] | None = None,
                      describe: Callable[[BaseException], str] = str) -> EpisodeRun:
    """One episode: join capture session `session_id` (or open one from `create`), run the root loop under the
    wall clock (appending to `turns`), then score the answer with `task`'s verifier; without a task, only read the
    session's token count. `on_session` hears the session id once it is known; `describe` words a failure."""
    t0 = time.perf_counter()
    try:
        if session_id:
            proxy = ProxySession(rt.http, proxy_url, session_id, rt.cfg.env_server.proxy_timeout_s)
        else:
            proxy = await ProxySession.open(rt.http, proxy_url, create or SessionCreate(),
                                            rt.cfg.env_server.proxy_timeout_s)
    except ProxyCallError as e:
        return EpisodeRun(error=f"could not open a capture session: {describe(e)}", wall_s=time.perf_counter() - t0)
    if on_session is not None:
        on_session(proxy.session_id)
    harness = build_harness(rt, limits, proxy, sampling, on_event=on_event)
    tally, timed_out = harness.tally, False
    try:
        out = await asyncio.wait_for(harness.run_loop(question, context, depth=0, parent=None,
                                                      max_turns=limits.max_turns, turns=turns),
                                     timeout=max(tally.remaining_s(), 0.0))
    except asyncio.TimeoutError:
        out, timed_out = LoopOutcome(None, False, "timeout"), True
    except Unscorable as e:
        return EpisodeRun(llm_calls=tally.subcalls, total_tokens=tally.tokens, error=describe(e),
                          wall_s=time.perf_counter() - t0)
    run = EpisodeRun(answer=out.answer, stop_reason=out.stop_reason, llm_calls=tally.subcalls,
                     timed_out=timed_out, wall_s=time.perf_counter() - t0)
    if task is None:
        try:
            run.total_tokens = (await proxy.session_info()).total_tokens
        except ProxyCallError:
            run.total_tokens = tally.tokens
        return run
    verdict = await verify(rt, task, out.answer, via_final=out.via_final, harness=harness)
    run.total_tokens, run.components, run.verdict_error = verdict.total_tokens, verdict.components, verdict.error
    return run
