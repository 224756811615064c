"""The SFT anchor: its rows file, the order rows are drawn in, its loss on a real (tiny, in-memory) model, and
how the GRPO trainer adds it to a micro-batch's loss."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from fathom.trainer.anchor import IGNORE, AnchorDataError, SftAnchor, load_rows


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _tiny_lm():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg).eval()


def test_load_rows_keeps_rows_with_trained_tokens(tmp_path):
    rows = [{"input_ids": [1, 2, 3, 4], "labels": [IGNORE, IGNORE, 3, 4]},
            {"input_ids": [5, 6], "labels": [IGNORE, IGNORE]},  # nothing trained: skipped
            {"input_ids": [7, 8], "labels": [7, IGNORE]}]  # only the first label, which is never predicted
    got = load_rows(_write(tmp_path / "data.jsonl", rows))
    assert got == rows[:1]


def test_load_rows_picks_the_named_families(tmp_path):
    rows = [{"input_ids": [1, 2], "labels": [IGNORE, 2], "family": "code_qa"},
            {"input_ids": [3, 4], "labels": [IGNORE, 4], "family": "needle"},
            {"input_ids": [5, 6], "labels": [IGNORE, 6], "family": "code_qa"}]
    path = _write(tmp_path / "data.jsonl", rows)
    assert [r["input_ids"] for r in load_rows(path, ["code_qa"])] == [[1, 2], [5, 6]]
    assert len(load_rows(path)) == 3
    with pytest.raises(AnchorDataError, match=r"has no row of the families \['pairs'\]"):
        load_rows(path, ["pairs"])
    old = _write(tmp_path / "old.jsonl", [{"input_ids": [1, 2], "labels": [IGNORE, 2]}])
    with pytest.raises(AnchorDataError, match="old.jsonl:1 names no family"):
        load_rows(old, ["code_qa"])


@pytest.mark.parametrize("lines, says", [
    (None, "does not exist"),
    (["not json"], "data.jsonl:1 is not a row"),
    ([{"input_ids": [1, 2]}], "data.jsonl:1 is not a row"),
    ([{"input_ids": [1, 2], "labels": [1, 2]}, {"input_ids": [1, 2, 3], "labels": [1, 2]}],
     "data.jsonl:2: 3 input_ids but 2 labels"),
    ([{"input_ids": [1, 2], "labels": [IGNORE, IGNORE]}], "has no row with a trained token"),
])
def test_bad_rows_file_names_the_file_and_the_fix(tmp_path, lines, says):
    path = tmp_path / "data.jsonl"
    if lines is not None:
        _write(path, lines)
    with pytest.raises(AnchorDataError) as e:
        load_rows(path)
    assert says in str(e.value) and "trainer.sft_anchor_data" in str(e.value)


def test_rows_are_drawn_once_each_before_any_repeats_in_a_seeded_order():
    rows = [{"input_ids": [i, i], "labels": [IGNORE, i]} for i in range(5)]
    a, b = SftAnchor(rows, 1.0, seed=3), SftAnchor(rows, 1.0, seed=3)
    first = [a.next_row()["input_ids"][0] for _ in range(5)]
    second = [a.next_row()["input_ids"][0] for _ in range(5)]
    assert sorted(first) == sorted(second) == list(range(5))
    assert first == [b.next_row()["input_ids"][0] for _ in range(5)]
    assert first != [SftAnchor(rows, 1.0, seed=4).next_row()["input_ids"][0] for _ in range(5)]


def test_nll_is_the_mean_loss_over_labelled_tokens_only():
    model = _tiny_lm()
    ids = [3, 9, 4, 17, 22, 8, 41]
    labels = [IGNORE, IGNORE, IGNORE, 17, 22, IGNORE, 41]
    nll = SftAnchor([{"input_ids": ids, "labels": labels}], 1.0).nll(model)
    with torch.no_grad():
        logp = model(input_ids=torch.tensor([ids])).logits[0].log_softmax(-1)
    want = -sum(logp[i - 1, ids[i]].item() for i in (3, 4, 6)) / 3
    assert nll.item() == pytest.approx(want, rel=1e-5)
    nll.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_grpo_loss_gains_coef_times_nll_over_accumulation_steps(monkeypatch):
    from trl.experimental.async_grpo import AsyncGRPOTrainer

    from fathom.trainer.grpo import FathomGRPOTrainer

    model = _tiny_lm()
    row = {"input_ids": [3, 9, 4, 17], "labels": [IGNORE, IGNORE, 4, 17]}
    monkeypatch.setattr(AsyncGRPOTrainer, "compute_loss", lambda self, *a, **k: torch.tensor(0.25))
    trainer = object.__new__(FathomGRPOTrainer)
    trainer.accelerator = SimpleNamespace(unwrap_model=lambda m: m)
    trainer.current_gradient_accumulation_steps = 2
    trainer._metrics = {"train": {"sft_anchor/nll": []}}
    trainer.sft_anchor = SftAnchor([row], 0.5)
    loss = trainer.compute_loss(model, {"input_ids": torch.tensor([[1, 2]])})
    nll = SftAnchor([row], 1.0).nll(model).item()
    assert loss.item() == pytest.approx(0.25 + 0.5 * nll / 2, rel=1e-5)
    assert trainer._metrics["train"]["sft_anchor/nll"] == [pytest.approx(nll, rel=1e-5)]
    trainer.sft_anchor = None  # off: TRL's loss untouched
    assert trainer.compute_loss(model, {"input_ids": torch.tensor([[1, 2]])}).item() == 0.25
