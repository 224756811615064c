"""SFT step time: the SFT stage's own trainer (`fathom.trainer.sft.train_sft`) on a recorded SFT data file, with
shared-prefix steps (`sft.share_prefix`, the CPU default) against one row a forward pass.

Both variants train the same rows, `--steps` optimizer steps of `sft.batch_size` rows each, from the same config
(`--config`) and model, on every core this process may use, as `fathom sft` does; they take turns (`--reps` times),
so a neighbour's load falls on both, and the fastest pass of each counts. `--fp32` turns off bf16 autocast where it is
native, which is how a CPU without native bf16 (AVX2 only) trains: the per-step figure is what a stage-time model for
such a machine starts from (docs/benchmarks.md). Progress goes to stderr as it is measured; stdout gets one JSON object
with a `targets` list.

A data file is written by every SFT stage (`runs/NAME/sft/data.jsonl`), so this benchmark reads a finished run and
`make bench` leaves it out:

    .venv/bin/python bench/sft_steps.py --data runs/NAME/sft/data.jsonl [--steps 8] [--reps 1] [--fp32]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fathom.unwind import sigterm_unwinds


def say(obj: dict) -> None:
    print(json.dumps(obj), file=sys.stderr, flush=True)


def read_rows(path: Path, n: int, seed: int) -> list[dict]:
    """`n` rows of a data file, drawn without replacement with `seed` (SFT shuffles its rows the same way)."""
    if not path.is_file():
        raise SystemExit(f"--data {path}: no such file; pass an SFT stage's data file (runs/NAME/sft/data.jsonl)")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if len(rows) < n:
        raise SystemExit(f"--data {path} has {len(rows)} rows, fewer than --steps x sft.batch_size = {n}; "
                         "pass fewer --steps")
    return random.Random(seed).sample(rows, n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, type=Path, help="an SFT stage's data.jsonl")
    ap.add_argument("--config", default="configs/smoke.toml")
    ap.add_argument("--steps", type=int, default=8, help="optimizer steps each variant trains")
    ap.add_argument("--reps", type=int, default=1, help="passes of each variant, interleaved; the fastest counts")
    ap.add_argument("--fp32", action="store_true", help="train in fp32 even where bf16 is native")
    a = ap.parse_args()
    from fathom.config import load_config
    from fathom.policy_server.models import resolve_model
    from fathom.trainer.sft import train_sft

    cfg = load_config(a.config)
    rows = read_rows(a.data, a.steps * cfg.sft.batch_size, cfg.sft.seed)
    model_dir = resolve_model(cfg.model, local_only=True)
    out: dict = {"bench": "sft_steps", "data": str(a.data), "rows": len(rows), "steps": a.steps,
                 "batch_size": cfg.sft.batch_size, "row_tokens": sum(len(r["input_ids"]) for r in rows),
                 "fp32": a.fp32}
    say(out)
    best: dict[str, dict] = {}
    for rep in range(a.reps):
        for share in (True, False):
            sft = cfg.sft.model_copy(update={"share_prefix": share, "micro_batch_size": 1, "epochs": 1.0,
                                             **({"bf16": False} if a.fp32 else {})})
            with tempfile.TemporaryDirectory(prefix="fathom-bench-sft-") as tmp:
                m = train_sft(model_dir, rows, Path(tmp), sft=sft, lora=cfg.trainer.lora)
            name = "shared" if share else "flat"
            got = {"wall_s": m["wall_s"], "s_per_step": round(m["wall_s"] / a.steps, 2),
                   "forwarded_token_frac": m["forwarded_token_frac"], "last_loss": m["last_loss"],
                   "matmul_dtype": m["matmul_dtype"], "flop_fraction_of_peak": m["flop_fraction_of_peak"]}
            say({"rep": rep, "variant": name, **got})
            if name not in best or got["wall_s"] < best[name]["wall_s"]:
                best[name] = got
    out.update(best)
    frac = best["shared"]["forwarded_token_frac"]
    speedup = round(best["flat"]["wall_s"] / best["shared"]["wall_s"], 2)
    loss_diff = abs(best["shared"]["last_loss"] - best["flat"]["last_loss"])
    out["flat_over_shared_wall"] = speedup
    out["targets"] = [
        {"name": "shared_over_row_forward_tokens", "value": frac, "target": "<= 0.8", "met": frac <= 0.8},
        {"name": "flat_over_shared_step_wall", "value": speedup, "target": "> 1", "met": speedup > 1},
        # the same rows in the same order: the last step's loss agrees up to the dtype's rounding
        {"name": "last_loss_abs_diff", "value": round(loss_diff, 5), "target": "< 1e-2", "met": loss_diff < 1e-2},
    ]
    print(json.dumps(out))


if __name__ == "__main__":
    sigterm_unwinds()
    main()
