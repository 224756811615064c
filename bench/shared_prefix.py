"""Shared-prefix benchmark: LoRA fwd+bwd of one GRPO group on CPU, packed flat (TRL 1.15) against with the group's
prompt forwarded once (`fathom/trainer/prefix_tree.py`), and against TRL 1.16's prefix tree when TRL 1.16 is
importable.

A group is `--completions` samples that share a `--prompt`-token prompt. Flat packing concatenates the samples, so
the prompt is forwarded once per sample. The shared row forwards it once, and each sample's branch attends to it
(`cpu_compat.segment_sdpa` reads the tree from the position ids). TRL 1.16's `TreeRow` also shares the leading
completion tokens samples agree on. Every packing scores the same completion tokens with the trainer's CPU log-prob
head (`cpu_compat.TorchChunkedLogProb`) and backpropagates a GRPO-shaped loss into the LoRA weights, on one model,
pinned to one core as the trainer is, under bf16 autocast where it is native (`--fp32` forces fp32); the passes are
interleaved and CPU seconds are reported beside wall seconds, so a busy neighbour core skews them less. The logprob
difference from the flat row is measured in fp32 without autocast. Progress goes to stderr as it is measured; stdout
gets one JSON object with a `targets` list.

    .venv/bin/python bench/shared_prefix.py [--model embedded|tiny] [--prompt 600]
        [--completions 320,240,380,200,300,360,260,340] [--cpu 1] [--reps 1] [--fp32]
    PYTHONPATH=/path/to/trl-1.16:. ...   # adds TRL 1.16's packing
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fathom.unwind import sigterm_unwinds


def group(prompt_len: int, completion_lens: list[int], seed: int = 0) -> list[dict]:
    """One GRPO group: a shared random prompt, then a random completion per sample (trained tokens)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, 40000, (prompt_len,), generator=g)
    samples = []
    for i, n in enumerate(completion_lens):
        ids = torch.cat([prompt, torch.randint(0, 40000, (n,), generator=g)])
        mask = torch.cat([torch.zeros(prompt_len, dtype=torch.long), torch.ones(n, dtype=torch.long)])
        samples.append({"input_ids": ids, "completion_mask": mask, "old_log_probs": torch.zeros(len(ids)),
                        "advantage": float(i % 2) - 0.5, "group_id": 0})
    return samples


def flat_row(samples: list[dict]) -> dict:
    """TRL 1.15's padding-free row: samples end to end, positions resetting; the loss terms in sample order."""
    import torch

    ids, pos, index, targets, adv, at = [], [], [], [], [], 0
    for s in samples:
        n = len(s["input_ids"])
        ids.append(s["input_ids"])
        pos.append(torch.arange(n))
        trained = torch.nonzero(s["completion_mask"][1:]).flatten() + 1
        index.append(trained - 1 + at)  # a token is scored off its predecessor's hidden state
        targets.append(s["input_ids"][trained])
        adv.append(torch.full((len(trained),), s["advantage"]))
        at += n
    cat = torch.cat
    return {"input_ids": cat(ids)[None], "position_ids": cat(pos)[None], "token_index": cat(index),
            "targets": cat(targets), "advantages": cat(adv), "extra": {}}


def shared_row(samples: list[dict]) -> dict:
    """FATHOM's shared-prefix row (`prefix_tree.share_row`) in TRL 1.15's tensors, loss terms in the flat order."""
    import torch

    from fathom.trainer.prefix_tree import share_row

    ordered, drops = share_row(samples)
    ids, pos, where, at = [], [], {}, 0
    for s, d in zip(ordered, drops):
        n = len(s["input_ids"])
        ids.append(s["input_ids"][d:])
        pos.append(torch.arange(d, n))
        where[id(s)] = at - d  # row index of the sample's position 0, were it kept
        at += n - d
    index = []
    for s in samples:  # the flat row's order
        trained = torch.nonzero(s["completion_mask"][1:]).flatten()  # predecessor positions of trained tokens
        index.append(trained + where[id(s)])
    flat = flat_row(samples)
    return {"input_ids": torch.cat(ids)[None], "position_ids": torch.cat(pos)[None], "token_index": torch.cat(index),
            "targets": flat["targets"], "advantages": flat["advantages"], "extra": {}}


def trl116_row(samples: list[dict]) -> dict | None:
    """TRL 1.16's prefix-tree row of the same samples (same loss-term order), or None without TRL 1.16. The
    attention needs only its position ids: its depth-first layout is one `prefix_tree.tree_runs` reads."""
    try:
        from trl.experimental.async_grpo.packing import TreeRow
    except ImportError:
        return None
    row = TreeRow()
    for s in samples:
        row.add(s)
    p = row.pack()
    return {"input_ids": p["input_ids"][None], "position_ids": p["position_ids"][None], "token_index": p["token_index"],
            "targets": p["shift_labels"][p["token_index"]], "advantages": p["advantages"], "extra": {}}


def log_probs(model, row: dict):
    """Each loss term's log-prob, through the backbone and the trainer's CPU log-prob head."""
    from fathom.trainer.cpu_compat import TorchChunkedLogProb

    backbone = model.get_base_model().model
    hidden = backbone(input_ids=row["input_ids"], position_ids=row["position_ids"], use_cache=False,
                      **row["extra"]).last_hidden_state[0]
    head = model.get_output_embeddings()
    return TorchChunkedLogProb.apply(hidden[row["token_index"]], head.weight, head.bias, row["targets"], 1.0)[0]


def fwd_bwd(model, row: dict, bf16: bool) -> tuple[float, float]:
    """Wall and CPU seconds of one fwd+bwd of a GRPO-shaped loss over the row's loss terms."""
    import torch

    t0, c0 = time.perf_counter(), time.process_time()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        lp = log_probs(model, row)
    (-(lp.float().exp() * row["advantages"]).mean()).backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0, time.process_time() - c0


def load(model_name: str):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from fathom.policy_server.models import prepare_embedded
    from fathom.trainer import cpu_compat

    path = str(prepare_embedded()) if model_name == "embedded" else str(Path.home() / ".cache/fathom/models/tiny-random")
    torch.manual_seed(0)
    # LoRA B starts random, not zero, so the adapter changes the logprobs being compared
    lora = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM", init_lora_weights=False)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation=cpu_compat.SEGMENT_SDPA)
    model = get_peft_model(model, lora)
    model.train()
    return model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=("embedded", "tiny"), default="embedded")
    ap.add_argument("--prompt", type=int, default=600, help="tokens of the prompt the group shares")
    ap.add_argument("--completions", default="320,240,380,200,300,360,260,340", help="completion length per sample")
    ap.add_argument("--cpu", type=int, default=1, help="the core to pin to (trainer.cpu_cores in smoke.toml)")
    ap.add_argument("--reps", type=int, default=1, help="timed passes of each packing (after a short warm-up); the best one counts")
    ap.add_argument("--fp32", action="store_true", help="time in fp32 even where bf16 is native")
    a = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {a.cpu})
    import torch

    from fathom.trainer import cpu_compat

    torch.set_num_threads(1)
    cpu_compat.register_segment_sdpa()
    bf16 = cpu_compat.native_bf16() and not a.fp32
    completions = [int(x) for x in a.completions.split(",")]
    samples = group(a.prompt, completions)
    rows = {"flat": flat_row(samples), "shared": shared_row(samples), "trl116": trl116_row(samples)}
    rows = {k: v for k, v in rows.items() if v is not None}
    out: dict = {"bench": "shared_prefix", "model": a.model, "prompt_tokens": a.prompt, "completion_tokens": completions,
                 "bf16_autocast": bf16, "cpu": a.cpu, "packings": list(rows)}
    model = load(a.model)
    lps = {}
    for name, row in rows.items():
        out[f"{name}_forward_tokens"] = row["input_ids"].shape[1]
        with torch.no_grad():
            lps[name] = log_probs(model, row)  # fp32, no autocast
        if name != "flat":
            out[f"{name}_max_abs_logprob_diff_fp32"] = float((lps[name] - lps["flat"]).abs().max())
    say(out)
    # TRL 1.16's row is timed only where it forwards a different number of tokens from FATHOM's
    timed = [n for n in rows if n != "trl116" or out["trl116_forward_tokens"] != out["shared_forward_tokens"]]
    fwd_bwd(model, flat_row(group(64, [64])), bf16)  # a 128-token warm-up of oneDNN's kernels and the allocator
    # interleaved, so a neighbour's load on the core falls on every packing alike; CPU seconds beside wall seconds
    times: dict[str, list] = {name: [] for name in timed}
    for rep in range(a.reps):
        for name in timed:
            wall, cpu = fwd_bwd(model, rows[name], bf16)
            say({"rep": rep, "packing": name, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2)})
            times[name].append((wall, cpu))
    # the best pass: a neighbour's load only ever adds time (a 7,200-token flat pass took 45-125 CPU-s at load 15-50)
    for name, ts in times.items():
        out[f"{name}_fwd_bwd_wall_s"] = round(min(t[0] for t in ts), 2)
        out[f"{name}_fwd_bwd_cpu_s"] = round(min(t[1] for t in ts), 2)
    ratio = round(out["shared_forward_tokens"] / out["flat_forward_tokens"], 3)
    speedup = round(out["flat_fwd_bwd_cpu_s"] / out["shared_fwd_bwd_cpu_s"], 2)
    mismatch = out["shared_max_abs_logprob_diff_fp32"]
    out.update(forward_token_ratio=ratio, speedup_cpu_s=speedup)
    out["targets"] = [
        {"name": "shared_over_flat_forward_tokens", "value": ratio, "target": "<= 0.8", "met": ratio <= 0.8},
        {"name": "flat_over_shared_fwd_bwd_cpu_s", "value": speedup, "target": "> 1", "met": speedup > 1},
        {"name": "shared_max_abs_logprob_diff_fp32", "value": mismatch, "target": "< 1e-3", "met": mismatch < 1e-3},
    ]
    print(json.dumps(out))


def say(obj: dict) -> None:
    print(json.dumps(obj), file=sys.stderr, flush=True)


if __name__ == "__main__":
    sigterm_unwinds()  # `timeout` or a job runner's SIGTERM still runs the blocks that stop servers
    main()
