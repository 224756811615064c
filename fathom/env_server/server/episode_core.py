"""What both ways of running an episode share: set-up (limits, tally with its wall clock, harness)
and verification (session tokens, then the task's scorer).

`/episodes` (episodes.py) drives the harness loop itself; step mode (environment.py) runs one
action per `step`. Both build the episode here and score it here, so a limit or a scoring rule
cannot differ between them.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fathom.env_server.server.harness import EventHook, Harness, Limits, Tally
from fathom.capture_proxy.client import ProxySession, ProxyError
from fathom.protocol import EpisodeLimits, RewardComponents, Sampling

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
        except ProxyError as e:
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
