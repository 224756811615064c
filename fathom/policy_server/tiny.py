"""Small models for fast tests: a tiny random-init Llama and PEFT LoRA adapters for it.

The tiny model shares the embedded model's tokenizer and Qwen2.5 chat template, so every
code path that renders chat or reads token ids behaves as in production, in seconds.
"""

from __future__ import annotations

from pathlib import Path

from fathom.config.model import TINY
from fathom.policy_server.models import (
    MANIFEST,
    TINY_DIRNAME,
    load_gguf_tokenizer,
    write_manifest,
    embedded_gguf,
    is_prepared,
    models_dir,
)


def build_tiny(out: Path | None = None, force: bool = False, seed: int = 0) -> Path:
    """A 2-layer, hidden-128 random-init Llama with the embedded tokenizer and chat template, for fast tests."""
    d = out or models_dir() / TINY_DIRNAME
    if not force and is_prepared(d):
        return d  # before torch's import: a prepared model costs its checksum only
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    d.mkdir(parents=True, exist_ok=True)
    (d / MANIFEST).unlink(missing_ok=True)
    tok = load_gguf_tokenizer(embedded_gguf())
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,  # head_dim 64: a size vLLM's CPU attention kernels support
        num_key_value_heads=2,
        max_position_embeddings=8192,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=True,
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(d, safe_serialization=True)
    tok.save_pretrained(d)
    write_manifest(d, kind=TINY, seed=seed)
    return d
