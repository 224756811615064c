"""Which model the run uses, shared by the policy server and the trainer."""

from __future__ import annotations

from typing import Literal

from fathom.config.base import FathomModel

EMBEDDED = "embedded"
"""The model name that means 'the prepared SmolLM2-135M-Instruct under $FATHOM_HOME'."""

TINY = "tiny"
"""The model name that means 'the tiny random-init test model under $FATHOM_HOME'."""


class ModelConfig(FathomModel):
    name: str = EMBEDDED
    """A Hub id (e.g. Qwen/Qwen2.5-Coder-1.5B-Instruct), a local model directory, or `embedded` / `tiny`."""

    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights dtype; the policy server and the trainer must agree or logprobs drift."""

    revision: str | None = None
    """Hub revision to pin when `name` is a Hub id."""

    max_model_len: int = 4096
    """Context length the engine reserves per sequence."""
