"""The JSON of `bench/gpu_smoke.sh`: read a GRPO run's metrics.jsonl and say how the GPU steps and syncs went.

    python bench/gpu_smoke_report.py runs/gpu-smoke

`served_logprobs_changed`: after the first merged sync the trainer's weights have moved (its LoRA is no
longer zero), and the logprobs vLLM returns for on-policy samples still agree with the trainer's
(mismatch under 1e-3) - so vLLM is serving the new weights, not the old ones.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main() -> None:
    run = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/gpu-smoke")
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [r for r in rows if "loss" in r]

    def values(key: str) -> list[float]:
        return [float(r[key]) for r in rows if isinstance(r.get(key), (int, float))]

    sync, mismatch, step_s = values("perf/weight_sync_s"), values("mismatch/abs_ratio_minus_1"), values("step_time")
    after_sync = mismatch[1:] if len(mismatch) > 1 else []
    changed = bool(sync) and bool(after_sync) and max(after_sync) < 1e-3
    out = {
        "run_dir": str(run), "steps": len(steps),
        "merged_sync_s": sync, "step_time_s": step_s or None, "mismatch": mismatch,
        "served_logprobs_changed": changed,
        "targets": [
            {"name": "steps_completed", "value": len(steps), "target": ">= 3", "met": len(steps) >= 3},
            {"name": "merged_sync_s_median", "value": statistics.median(sync) if sync else None, "target": "<= 2",
             "met": bool(sync) and statistics.median(sync) <= 2},
            {"name": "mismatch_max", "value": max(mismatch) if mismatch else None, "target": "< 1e-3",
             "met": bool(mismatch) and max(mismatch) < 1e-3},
            {"name": "served_logprobs_changed", "value": changed, "target": "true", "met": changed},
        ],
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
