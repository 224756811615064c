"""`train_sft` on the tiny model: TRL's SFTTrainer writes the adapter; splitting a step into micro-batches (gradient
accumulation, no padding) trains the same step as one padded batch, and so does one shared-prefix packed row a step
(`sft.share_prefix`)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fathom.config.sft import SftConfig
from fathom.config.trainer import LoraConfig
from fathom.trainer.sft import IGNORE, train_sft


PROMPT = list(range(10, 22))
"""The system prompt every row starts with."""


def _rows(vocab: int) -> list[dict[str, list[int]]]:
    """Eight rows of different lengths and different numbers of trained tokens, so padding and the per-micro-batch
    token count both matter, after a common prompt."""
    rng = random.Random(0)
    rows = []
    for i in range(8):
        n, k = 40 + 23 * i, 5 + 7 * (i % 3)
        ids = PROMPT + [rng.randrange(10, vocab) for _ in range(n - len(PROMPT))]
        rows.append({"input_ids": ids, "labels": [IGNORE] * (n - k) + ids[n - k:]})
    return rows


def _train(model_dir: Path, out: Path, micro: int, share: bool = False) -> tuple[dict, dict[str, torch.Tensor]]:
    sft = SftConfig(batch_size=4, micro_batch_size=micro, share_prefix=share, epochs=1.0, bf16=False,
                    learning_rate=1e-2)
    lora = LoraConfig(rank=4, alpha=8, target_modules=["q_proj", "v_proj"])
    from transformers import AutoTokenizer

    metrics = train_sft(model_dir, _rows(len(AutoTokenizer.from_pretrained(model_dir))), out, sft=sft, lora=lora)
    return metrics, load_file(str(out / "adapter" / "adapter_model.safetensors"))


@pytest.fixture(scope="module")
def split_run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict[str, torch.Tensor]]:
    """One row a micro-batch, no prefix sharing: the run both tests compare against (trained once)."""
    return _train(tiny_model_dir, tmp_path_factory.mktemp("split"), micro=1)


def test_micro_batches_train_the_same_steps_as_one_padded_batch(tiny_model_dir: Path, tmp_path: Path,
                                                                 split_run: tuple) -> None:
    whole, w_whole = _train(tiny_model_dir, tmp_path / "whole", micro=4)
    split, w_split = split_run
    assert whole["steps"] == split["steps"] == 2
    # The run's FLOP/s against the matmul peak measured after it: the tiny model's LoRA fwd+bwd on 8 rows of
    # 40-201 tokens (q and v adapted, rank 4), over the training wall time.
    from transformers import AutoConfig

    from fathom.trainer import limits

    layers, heads, _kv, head_dim = limits.attention_shape(AutoConfig.from_pretrained(tiny_model_dir))
    assert whole["matmul_dtype"] == "float32" and whole["matmul_peak_flop_s"] > 0 and whole["copy_bytes_s"] > 0
    lengths = [len(r["input_ids"]) for r in _rows(49152)]
    cfg = AutoConfig.from_pretrained(tiny_model_dir)
    base = layers * (2 * cfg.hidden_size * heads * head_dim + 2 * cfg.hidden_size * cfg.num_key_value_heads * head_dim
                     + 3 * cfg.hidden_size * cfg.intermediate_size) + cfg.vocab_size * cfg.hidden_size
    lora_w = layers * 4 * (2 * cfg.hidden_size + cfg.hidden_size + cfg.num_key_value_heads * head_dim)
    flops = limits.train_flops(base, lora_w, layers, heads, head_dim, lengths)
    assert whole["flops_per_epoch"] == flops
    assert whole["achieved_flop_s"] == pytest.approx(flops / whole["wall_s"], rel=0.2)  # wall_s is rounded to 0.1 s
    assert whole["flop_fraction_of_peak"] == pytest.approx(whole["achieved_flop_s"] / whole["matmul_peak_flop_s"],
                                                           rel=1e-3)
    assert 0 < whole["flop_fraction_of_peak"] < 1
    log = [json.loads(line) for line in (tmp_path / "whole" / "sft_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2]
    # The step's loss is the mean over its trained tokens either way (a mean of per-row means would differ here).
    assert split["first_loss"] == pytest.approx(whole["first_loss"], rel=1e-4)
    assert split["last_loss"] == pytest.approx(whole["last_loss"], rel=1e-3)
    assert w_whole.keys() == w_split.keys() and any("lora_B" in k for k in w_whole)
    assert any(w_whole[k].abs().max() > 0 for k in w_whole if "lora_B" in k)  # the adapter trained
    for k in w_whole:
        assert torch.allclose(w_whole[k], w_split[k], atol=1e-4), k


def test_shared_prefix_steps_train_the_same_adapter_on_fewer_tokens(tiny_model_dir: Path, tmp_path: Path,
                                                                   split_run: tuple) -> None:
    split, w_split = split_run
    shared, w_shared = _train(tiny_model_dir, tmp_path / "shared", micro=1, share=True)
    assert (split["share_prefix"], shared["share_prefix"]) == (False, True)
    tokens = sum(len(r["input_ids"]) for r in _rows(49152))
    assert split["forwarded_tokens"] == tokens and split["forwarded_token_frac"] == 1.0
    # two steps of four rows: each step forwards the common prompt once, not four times
    assert shared["forwarded_tokens"] == tokens - 2 * 3 * len(PROMPT)
    assert shared["forwarded_token_frac"] == round(shared["forwarded_tokens"] / tokens, 4)
    assert 0 < shared["flops_per_epoch"] < split["flops_per_epoch"]
    log = [json.loads(line) for line in (tmp_path / "shared" / "sft_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2] and all(r["forwarded_token_frac"] < 1 for r in log)
    assert shared["first_loss"] == pytest.approx(split["first_loss"], rel=1e-4)
    assert shared["last_loss"] == pytest.approx(split["last_loss"], rel=1e-3)
    assert any(w_shared[k].abs().max() > 0 for k in w_shared if "lora_B" in k)
    for k in w_split:
        assert torch.allclose(w_shared[k], w_split[k], atol=1e-4), k


def test_batch_size_must_be_a_multiple_of_the_micro_batch() -> None:
    with pytest.raises(ValueError, match=r"sft.batch_size \(4\) is not a multiple of sft.micro_batch_size \(3\)"):
        SftConfig(batch_size=4, micro_batch_size=3)
