"""Adapters outside the GRPO loop, on the tiny model: GRPO's warm start, and merged weights as vLLM loads them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from fathom.config.trainer import LoraConfig as FathomLora
from fathom.trainer.adapters import AdapterError, load_init_adapter, merged_tensors

TARGETS = ["q_proj", "v_proj"]


def _peft(model_dir: Path, rank: int = 8):
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return get_peft_model(base, LoraConfig(r=rank, lora_alpha=16, target_modules=TARGETS, task_type="CAUSAL_LM"))


@pytest.fixture(scope="module")
def sft_adapter(tiny_model_dir: Path, tmp_path_factory) -> Path:
    model = _peft(tiny_model_dir)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.05)  # a trained adapter: B is no longer zero
    out = tmp_path_factory.mktemp("sft") / "adapter"
    model.save_pretrained(out)
    return out


def _lora_state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters() if "lora_" in k}


def test_grpo_continues_the_warm_start_adapter(tiny_model_dir: Path, sft_adapter: Path) -> None:
    saved = _peft(tiny_model_dir)
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(saved, load_file(str(sft_adapter / "adapter_model.safetensors")))
    fresh = _peft(tiny_model_dir)
    assert any(not torch.equal(a, b) for a, b in zip(_lora_state(fresh).values(), _lora_state(saved).values()))
    load_init_adapter(fresh, str(sft_adapter), FathomLora(rank=8, alpha=16, target_modules=TARGETS))
    got, want = _lora_state(fresh), _lora_state(saved)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got)


def test_a_warm_start_of_another_shape_is_refused(tiny_model_dir: Path, sft_adapter: Path, tmp_path: Path) -> None:
    with pytest.raises(AdapterError, match=r"'r': 8.*'r': 16"):
        load_init_adapter(_peft(tiny_model_dir, 16), str(sft_adapter), FathomLora(rank=16, alpha=16, target_modules=TARGETS))
    with pytest.raises(AdapterError, match="is not a PEFT adapter"):
        load_init_adapter(_peft(tiny_model_dir), str(tmp_path), FathomLora(rank=8, alpha=16, target_modules=TARGETS))


def test_merged_tensors_are_base_plus_the_adapter_under_checkpoint_names(tiny_model_dir: Path, sft_adapter: Path) -> None:
    base = dict(merged_tensors(tiny_model_dir, None))
    merged = dict(merged_tensors(tiny_model_dir, str(sft_adapter)))
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    assert base.keys() == merged.keys() == {k for k, _ in plain.named_parameters()}
    changed = {k for k in base if not torch.equal(base[k], merged[k])}
    assert changed and all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in changed)
