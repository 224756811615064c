"""Settings of the task suite and its reward (owned by the tasks component)."""

from __future__ import annotations

from fathom.config.base import FathomModel


class RewardConfig(FathomModel):
    correctness: float = 0.7
    """Weight of answer correctness."""

    format: float = 0.1
    """Weight of answering through FINAL."""

    wrong_ceiling: float = 0.1
    """No wrong answer may score above this total."""


class TasksConfig(FathomModel):
    reward: RewardConfig = RewardConfig()
    """Reward component weights."""
