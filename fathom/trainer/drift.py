"""How far GRPO has moved the adapter from where it started (the SFT warm start).

TRL 1.15's AsyncGRPOTrainer keeps no reference model, so it logs no KL to the SFT policy: its `kl` is the
approximate KL between the trainer's policy and the one that sampled each batch (drift within a step, plus the
trainer/sampler mismatch). A true KL to SFT would need a second forward with the warm start's weights on every
trained token, which on a 2-core machine roughly doubles a step. The distance of the trainable (LoRA) weights from
their starting values costs a few milliseconds a step and says when, and how fast, the policy leaves SFT:
`drift/lora_delta_norm` is ||theta - theta_0|| over every trainable tensor, `drift/lora_delta_rel` that over
||theta_0|| (undefined, so not logged, for a fresh adapter whose B matrices start at 0).
"""

from __future__ import annotations

from typing import Any

import torch


def snapshot(model: Any) -> dict[str, torch.Tensor]:
    """A CPU copy of every trainable parameter, by name."""
    return {n: p.detach().to("cpu", torch.float32, copy=True) for n, p in model.named_parameters() if p.requires_grad}


def distance(model: Any, start: dict[str, torch.Tensor]) -> dict[str, float]:
    """The drift metrics of the module docstring for `model` against `start` (a `snapshot`); parameters not in
    `start` are skipped."""
    delta = base = 0.0
    for n, p in model.named_parameters():
        ref = start.get(n)
        if ref is None:
            continue
        cur = p.detach().to("cpu", torch.float32)
        delta += float((cur - ref).pow(2).sum())
        base += float(ref.pow(2).sum())
    out = {"drift/lora_delta_norm": delta ** 0.5}
    if base > 0:
        out["drift/lora_delta_rel"] = (delta / base) ** 0.5
    return out
