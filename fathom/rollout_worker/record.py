"""One rollout's own record in TRL's rollout child.

TRL's loop draws a dataset prompt and hands it, untouched, to the session factory as the task of one rollout
(`trl_compat.rollout.HarnessLoop.task_for`). FATHOM's loop hands it a `RolloutRecord` instead: the session reads the
prompt from it and writes back what TRL's rollout tuple has no field for: the episode id, the trace's policy
versions and the verified episode result. The loop logs the rollout from it once TRL's rollout returns
(`groups.FathomRolloutLoop.after_rollout`), and every training row of the rollout carries it to the group's scoring
(`groups.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fathom.protocol import EpisodeResult


@dataclass
class RolloutRecord:
    prompt: Any
    """The dataset prompt TRL drew for this rollout (a task id, or chat messages ending in one)."""

    episode_id: str | None = None
    """The episode the session ran for this rollout (TRL's rollout id); written when the session is created, and the
    key that groups the rollout's training rows at scoring (`groups.episode_keys`)."""

    policy_versions: tuple[int, int] | None = None
    """(oldest, newest) policy version that sampled any trained turn of the rollout's trace; None until the trace is
    fetched, and when no turn carries a version."""

    result: EpisodeResult | None = None
    """The episode result `verify()` scored the rollout by (its reward components, turns, stop reason); None until
    then, and for a rollout that failed before it was verified."""

    timed_out: bool = False
    """The episode was still running when the worker stopped waiting for it (TRL trains its captured turns)."""
