"""Which attention the trainer's model loads with, and the SDPA fallback when TRL's Hub kernel cannot load.

TRL 1.15's AsyncGRPOTrainer hard-codes `attn_implementation="kernels-community/flash-attn3"`, a kernel the
`kernels` package fetches from the Hub at run time: a machine without network, a Hub outage, or a GPU the kernel
has no build for fails the run when the model loads. `trainer.attention` chooses instead (config/trainer.py):
the fallback is `segment_sdpa` (cpu_compat.py), torch SDPA on each packed sequence alone, which is exact for
TRL's padding-free rows on any device.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

FLASH_ATTN3 = "kernels-community/flash-attn3"
"""What TRL asks for (async_grpo_trainer.py, `create_model_from_path(..., attn_implementation=...)`)."""


class AttentionError(RuntimeError):
    """`trainer.attention = "flash_attn3"` and the kernel cannot load; the message says why and what to set."""


def load_flash_kernel() -> None:
    """Fetch and register the Hub kernel in transformers, then run it once; raises what either raises."""
    from transformers.integrations.hub_kernels import load_and_register_attn_kernel

    probe(load_and_register_attn_kernel(FLASH_ATTN3))


def probe(kernel, device: str = "cuda") -> None:
    """One tiny causal bf16 call of the kernel's `flash_attn_func`. FlashAttention-3 was written for Hopper; a
    kernel that loads on another GPU (an A100 is sm80) may still have no code for it, and that would surface at the
    first training step, an hour into the job, instead of here."""
    import torch

    fn = getattr(kernel, "flash_attn_func", None)
    if fn is None:
        return  # a build without the plain entry point: transformers calls its varlen one, nothing to try here
    q = torch.randn(1, 16, 2, 64, device=device, dtype=torch.bfloat16)  # [batch, tokens, heads, head_dim]
    out = fn(q, q, q, causal=True)
    out = out[0] if isinstance(out, tuple) else out
    if tuple(out.shape) != tuple(q.shape) or not torch.isfinite(out.float()).all():
        raise RuntimeError(f"{FLASH_ATTN3}.flash_attn_func gave shape {tuple(out.shape)} or non-finite values on a "
                           "test input")


def choose(setting: str, *, cuda: bool, load: Callable[[], None] = load_flash_kernel) -> str:
    """The attn_implementation for `trainer.attention` = `setting`: FLASH_ATTN3 or cpu_compat.SEGMENT_SDPA.
    `auto` warns (naming the cause) when it falls back; `flash_attn3` raises AttentionError instead."""
    from fathom.trainer.cpu_compat import SEGMENT_SDPA, register_segment_sdpa

    if cuda and setting in ("auto", "flash_attn3"):
        try:
            load()
            return FLASH_ATTN3
        except Exception as e:  # ImportError (no `kernels`), ValueError (any Hub/build failure)
            if setting == "flash_attn3":
                raise AttentionError(f"trainer.attention = 'flash_attn3' but {FLASH_ATTN3} cannot load ({e}); set "
                                     "trainer.attention = 'sdpa' (or 'auto' to fall back with a warning)") from e
            warnings.warn(f"{FLASH_ATTN3} cannot load ({e}); training on SDPA per packed sequence instead. Set "
                          "trainer.attention = 'sdpa' to skip the attempt.", stacklevel=2)
    register_segment_sdpa()
    return SEGMENT_SDPA


def install(attn_implementation: str) -> None:
    """Make TRL load its model with `attn_implementation` in place of the hard-coded Hub kernel."""
    from fathom.trl_compat.trainer import replace_hub_attention

    replace_hub_attention(attn_implementation)
