"""Settings of the main job, `fathom launch`: which stages run and how its servers start."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fathom.config.base import FathomModel

Stage = Literal["sft", "grpo", "eval"]


class LaunchConfig(FathomModel):
    stages: list[Stage] = ["sft", "grpo", "eval"]
    """Stages `fathom launch` runs, in order. SFT is skipped anyway when `trainer.init_adapter` names a warm start."""

    eval_watch: bool = False
    """Also run `fathom eval watch` on the run's checkpoints while GRPO trains."""

    server_start_timeout_s: float = Field(600.0, gt=0)
    """How long each server (vLLM, proxy, env server) may take to become healthy."""
