"""Shared-prefix SFT steps (`fathom.trainer.sft_pack`, `sft.share_prefix`): the packed row a step's rows make, the
share of tokens it forwards, and that TRL's SFT loss and the LoRA gradients on it are those of today's path (one row
a forward pass, gradient accumulation over the step)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fathom.config.sft import SftConfig
from fathom.config.trainer import LoraConfig
from fathom.trainer import cpu_compat
from fathom.trainer.sft import build_trainer, share_prefix_on
from fathom.trainer.sft_pack import IGNORE, StepTally, pack_rows, sequences

V = 97
SYSTEM = [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
"""The system prompt every root row starts with."""


def _row(context: list[int], trained: list[int], *more: list[int]) -> dict[str, list[int]]:
    """A row: untrained `context`, then `trained`, then alternating untrained and trained parts (`more`)."""
    ids, labels = list(context), [IGNORE] * len(context)
    for i, part in enumerate((trained, *more)):
        ids += part
        labels += part if i % 2 == 0 else [IGNORE] * len(part)
    return {"input_ids": ids, "labels": labels}


def _rows() -> list[dict[str, list[int]]]:
    return [
        # two turns of one episode: the second row holds the first's context and answer, then a REPL reply
        _row([*SYSTEM, 20, 21, 22], [30, 31, 32]),
        _row([*SYSTEM, 20, 21, 22], [30, 31, 32], [40, 41], [50, 51]),
        # the same context as the first row up to its last untrained token: it shares everything before its first
        # trained token, and keeps that token (the one its first trained token is predicted from)
        _row([*SYSTEM, 20, 21, 22], [33, 34]),
        # another task: the system prompt only
        _row([*SYSTEM, 23, 24], [35, 36, 37]),
        # a sub-call row: its own prompt, nothing in common with the root rows
        _row([60, 61, 62], [63, 64]),
    ]


def test_a_step_forwards_a_shared_prefix_once_and_keeps_the_token_before_each_trained_one():
    rows = _rows()
    batch = pack_rows(rows)
    ids, labels, pos = (batch[k][0].tolist() for k in ("input_ids", "labels", "position_ids"))
    # sorted by token ids (the rows' order above); each row leaves out what it shares with the one before, but never
    # a trained token nor the token before its first one: the second row re-forwards the first's answer from the
    # token before it, the third keeps that token only, the fourth its own question, the sub-call row all of it
    assert ids == [*SYSTEM, 20, 21, 22, 30, 31, 32,
                   22, 30, 31, 32, 40, 41, 50, 51,
                   22, 33, 34,
                   23, 24, 35, 36, 37,
                   60, 61, 62, 63, 64]
    assert pos == [*range(16), *range(12, 20), *range(12, 15), *range(10, 15), *range(5)]  # each token's depth
    # every trained token of every row is a label, right after the token it is predicted from; run starts are not
    trained = sorted(t for r in rows for t in r["labels"][1:] if t != IGNORE)
    assert sorted(t for t in labels[1:] if t != IGNORE) == trained
    assert labels[13:16] == [30, 31, 32] and labels[16:24] == [IGNORE, 30, 31, 32, IGNORE, IGNORE, 50, 51]
    assert labels[24:27] == [IGNORE, 33, 34] and labels[27:32] == [IGNORE, IGNORE, 35, 36, 37]
    assert labels[32:] == [IGNORE, IGNORE, IGNORE, 63, 64]
    assert sequences(batch) == [(16, 0), (8, 12), (3, 12), (5, 10), (5, 0)]


def test_the_tally_reports_the_forwarded_share_per_step_and_over_the_run():
    rows = _rows()
    row_tokens = sum(len(r["input_ids"]) for r in rows)  # 16 + 20 + 15 + 15 + 5 = 71
    tally = StepTally()
    tally.add(pack_rows(rows))
    assert (tally.forwarded, tally.row_tokens) == (37, row_tokens)
    assert tally.take() == round(37 / 71, 4) and tally.take() is None  # one logged step, then nothing new
    # a padded micro-batch of two rows (today's path with micro_batch_size 2): padding is forwarded, not a row token
    padded = {"input_ids": torch.zeros(2, 20, dtype=torch.long),
              "attention_mask": torch.tensor([[1] * 20, [1] * 15 + [0] * 5])}
    tally.add(padded)
    assert sequences(padded) == [(20, 0), (15, 0)]
    assert tally.take() == round(40 / 35, 4)
    assert tally.frac() == round((37 + 40) / (71 + 35), 4)
    assert tally.runs == [(16, 0), (8, 12), (3, 12), (5, 10), (5, 0), (20, 0), (15, 0)]


def test_share_prefix_is_on_by_default_on_cpu_only_and_refuses_padded_micro_batches():
    assert share_prefix_on(SftConfig(), cuda=False) and not share_prefix_on(SftConfig(), cuda=True)
    assert not share_prefix_on(SftConfig(micro_batch_size=4), cuda=False)  # padded passes asked for: auto keeps them
    assert share_prefix_on(SftConfig(share_prefix=True), cuda=True)
    assert not share_prefix_on(SftConfig(share_prefix=False), cuda=False)
    with pytest.raises(ValueError, match=r"sft.share_prefix = true .* sft.micro_batch_size \(2\) cannot apply: set "
                                         r"micro_batch_size to 1, or share_prefix to false"):
        SftConfig(share_prefix=True, micro_batch_size=2)


def _tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(V)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="t0")), unk_token="t0",
                                   pad_token="t1", eos_token="t2")


def _trainer(tmp_path: Path, share: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    from fathom.trainer.sft_pack import StepTally

    cpu_compat.apply(force=True)
    cpu_compat.register_segment_sdpa()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64,
                      attn_implementation=cpu_compat.SEGMENT_SDPA if share else "sdpa")
    model = LlamaForCausalLM(cfg)
    sft = SftConfig(batch_size=5, micro_batch_size=1, share_prefix=share, bf16=False)
    lora = LoraConfig(rank=4, alpha=8, target_modules=["q_proj", "v_proj", "gate_proj"])
    tally = StepTally()
    trainer = build_trainer(model, _tokenizer(), _rows(), tmp_path / str(share), sft=sft, lora=lora, share=share,
                            total=1, tally=tally)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # LoRA B starts at 0, which leaves A without a gradient: give both values
        for name, p in sorted(trainer.model.named_parameters()):
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return trainer, tally


def _step(trainer, batches: list[dict]) -> tuple[float, dict[str, torch.Tensor], int]:
    """One optimizer step's loss and LoRA gradients as transformers' loop takes them: the step's trained-token count
    over all its micro-batches (`num_items_in_batch`), then TRL's training step on each."""
    model = trainer.model
    model.zero_grad()
    n = trainer._get_num_items_in_batch(batches, torch.device("cpu"))
    trainer.current_gradient_accumulation_steps = len(batches)
    loss = sum(float(trainer.training_step(model, dict(b), n)) for b in batches)
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad}
    return loss, grads, int(n)


def test_a_shared_prefix_step_has_the_loss_and_lora_gradients_of_one_row_a_pass(tmp_path: Path):
    rows = _rows()
    flat, flat_tally = _trainer(tmp_path, share=False)
    shared, shared_tally = _trainer(tmp_path, share=True)
    assert flat.args.gradient_accumulation_steps == 5 and shared.args.gradient_accumulation_steps == 1
    flat_loss, flat_grads, flat_n = _step(flat, [flat.data_collator([r]) for r in rows])
    loss, grads, n = _step(shared, [shared.data_collator(rows)])
    assert n == flat_n == sum(1 for r in rows for t in r["labels"][1:] if t != IGNORE)
    assert loss == pytest.approx(flat_loss, rel=1e-5)
    assert grads.keys() == flat_grads.keys() and any("lora_A" in k for k in grads)
    for k, g in grads.items():
        assert g.abs().max() > 0, k
        assert torch.allclose(g, flat_grads[k], rtol=1e-5, atol=1e-6 * flat_grads[k].abs().max()), k
    assert flat_tally.frac() == 1.0 and shared_tally.frac() == round(37 / 71, 4)
    # the check can fail: without the shared prefix's keys (each run read as a sequence of its own) the loss moves
    batch = shared.data_collator(rows)
    pos = batch["position_ids"][0]
    batch["position_ids"] = torch.cat([torch.arange(n) for n, _ in sequences(batch)])[None]
    assert not torch.equal(batch["position_ids"][0], pos)
    wrong, _, _ = _step(shared, [batch])
    assert wrong != pytest.approx(flat_loss, rel=1e-3)


def test_shared_rows_need_the_attention_that_reads_the_tree(tmp_path: Path):
    trainer, _ = _trainer(tmp_path, share=False)
    with pytest.raises(ValueError, match=r"need the fathom_segment_sdpa attention.* attends with 'sdpa'.* set "
                                         r"sft.share_prefix = false"):
        build_trainer(trainer.model.get_base_model(), _tokenizer(), _rows(), tmp_path / "x", sft=SftConfig(),
                      lora=LoraConfig(rank=4), share=True, total=1, tally=StepTally())
