"""Per-step training metrics the trainer adds to TRL's: the importance-sampling ratio's extremes and the adapter's
distance from where GRPO started."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
import torch

from fathom.trainer.drift import distance, snapshot
from fathom.trainer.grpo import FathomGRPOTrainer


def test_ratio_extremes_are_over_trained_tokens_only():
    trainer = object.__new__(FathomGRPOTrainer)  # no model: only the metric bookkeeping runs
    trainer._metrics = {"train": defaultdict(list)}
    trainer.model_version = 0
    # one packed sample of 5 tokens: the prompt token, then 4 the model sampled; the last is not trained
    old = torch.tensor([[0.0, -1.0, -1.0, -1.0, -1.0]])
    inputs = {"attention_mask": torch.ones(1, 5, dtype=torch.long), "old_log_probs": old,
              "completion_mask": torch.tensor([[0, 1, 1, 1, 0]]), "input_ids": torch.tensor([[9, 8, 7, 6, 5]]),
              "position_ids": torch.arange(5).unsqueeze(0)}
    # trainer logprobs for tokens 1..4 (shifted): ratios e^0.1, e^-0.2, 1, and e^3 on the untrained token
    log_probs = torch.tensor([[-0.9, -1.2, -1.0, 2.0]])
    trainer._log_mismatch(log_probs, inputs)
    m = trainer._metrics["train"]
    assert m["is_ratio/max"] == [pytest.approx(math.exp(0.1))]
    assert m["is_ratio/min"] == [pytest.approx(math.exp(-0.2))]
    # nothing trained: no extremes logged (an empty window must not log 0)
    trainer._metrics = {"train": defaultdict(list)}
    trainer._log_mismatch(log_probs, inputs | {"completion_mask": torch.zeros(1, 5, dtype=torch.long)})
    assert "is_ratio/max" not in trainer._metrics["train"]


def test_drift_measures_trainable_weights_from_their_start():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2, bias=False), torch.nn.Linear(2, 1, bias=False))
    model[0].weight.requires_grad_(False)  # a frozen base weight never counts
    with torch.no_grad():
        model[1].weight.copy_(torch.tensor([[3.0, 4.0]]))
    start = snapshot(model)
    assert set(start) == {"1.weight"}
    assert distance(model, start) == {"drift/lora_delta_norm": 0.0, "drift/lora_delta_rel": 0.0}
    with torch.no_grad():
        model[1].weight.add_(torch.tensor([[0.0, 1.0]]))
        model[0].weight.add_(100.0)
    out = distance(model, start)
    assert out["drift/lora_delta_norm"] == pytest.approx(1.0)
    assert out["drift/lora_delta_rel"] == pytest.approx(1.0 / 5.0)  # ||delta|| / ||start|| = 1 / 5


def test_drift_of_a_fresh_adapter_has_no_relative_change():
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()  # a fresh LoRA B matrix starts at 0
    start = snapshot(model)
    with torch.no_grad():
        model.weight.fill_(0.5)
    assert distance(model, start) == {"drift/lora_delta_norm": pytest.approx(math.sqrt(0.5))}
