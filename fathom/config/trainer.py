"""Trainer settings that other components must agree with (the trainer itself lands later)."""

from __future__ import annotations

from fathom.config.base import FathomModel


class LoraConfig(FathomModel):
    rank: int = 8
    """LoRA rank r."""

    alpha: int = 16
    """LoRA alpha."""

    dropout: float = 0.0
    """LoRA dropout; keep 0 so the trained policy matches what vLLM samples."""

    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    """Modules that get adapters."""


class TrainerConfig(FathomModel):
    learning_rate: float = 1e-5
    """AdamW learning rate for the LoRA parameters."""

    num_generations: int = 4
    """GRPO group size: rollouts per task."""

    max_staleness: int = 2
    """How many policy versions behind a rollout may be and still be trained on."""

    max_steps: int = 10
    """Optimizer steps for the run."""

    lora: LoraConfig = LoraConfig()
    """Adapter shape."""
