"""Attention benchmark: LoRA fwd+bwd of one padding-free GRPO row on CPU, block-diagonal mask against per-sequence.

The trainer packs several sequences into one row, `position_ids` resetting at each (TRL's padding-free rows).
transformers' `sdpa` turns the resets into a [row, row] block-diagonal mask; `segment_sdpa`
(fathom/trainer/cpu_compat.py, what the trainer loads on CPU) runs causal SDPA on each sequence alone. Both run
the embedded model on the same row, pinned to one core as the trainer is, under bf16 autocast where it is native.
Prints one JSON object with a `targets` list: tokens/s of each, their ratio, and each one's largest logit
difference from running every sequence on its own (the result both should reproduce).

    .venv/bin/python bench/attention.py [--lengths 1100,1000,900,1000] [--cpu 1] [--reps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainer_parts import fwd_bwd  # bench/trainer_parts.py, beside this script
from fathom.unwind import sigterm_unwinds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="1100,1000,900,1000", help="sequence lengths packed into the row")
    ap.add_argument("--cpu", type=int, default=1, help="the core to pin to (trainer.cpu_cores in smoke.toml)")
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {a.cpu})
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from fathom.policy_server.models import prepare_embedded
    from fathom.trainer import cpu_compat

    torch.set_num_threads(1)
    cpu_compat.apply(force=True)
    bf16 = cpu_compat.native_bf16()
    lengths = [int(x) for x in a.lengths.split(",")]
    torch.manual_seed(0)
    ids = torch.randint(0, 40000, (1, sum(lengths)))
    pos = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    lora = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM")
    out: dict = {"bench": "attention", "model": "embedded (SmolLM2-135M-Instruct)", "lengths": lengths,
                 "bf16_autocast": bf16, "cpu": a.cpu}
    for impl in ("sdpa", cpu_compat.SEGMENT_SDPA):
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(str(prepare_embedded()), dtype=torch.float32,
                                                                    attn_implementation=impl), lora)
        model.train()
        rate, logits = fwd_bwd(model, ids, pos, bf16, a.reps)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            alone = torch.cat([model(input_ids=part, use_cache=False).logits.float()
                               for part in ids.split(lengths, dim=1)], dim=1)
        name = "block_mask_sdpa" if impl == "sdpa" else "segment_sdpa"
        out[f"{name}_tok_s"] = round(rate, 1)
        out[f"{name}_max_abs_logit_diff_from_alone"] = float((logits - alone).abs().max())
    out["speedup"] = round(out["segment_sdpa_tok_s"] / out["block_mask_sdpa_tok_s"], 2)
    diff = out["segment_sdpa_max_abs_logit_diff_from_alone"]
    out["targets"] = [
        {"name": "segment_over_block_mask_fwd_bwd", "value": out["speedup"], "target": ">= 1.5",
         "met": out["speedup"] >= 1.5},
        {"name": "segment_sdpa_max_abs_logit_diff_from_alone", "value": diff, "target": "<= 1e-3", "met": diff <= 1e-3},
    ]
    print(json.dumps(out))


if __name__ == "__main__":
    sigterm_unwinds()  # `timeout` or a job runner's SIGTERM still runs the blocks that stop servers
    main()
