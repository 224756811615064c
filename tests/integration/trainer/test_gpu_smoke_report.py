"""bench/gpu_smoke_report.py, the JSON of the GPU check: read from metrics.jsonl lines the trainer writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def report(run: Path, rows: list[dict]) -> dict:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_smoke_report.py"), str(run)],
                         capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def step(n: int, shift: float | None, noise: float = 0.0) -> dict:
    row = {"step": n, "time": 100.0 + 20 * n, "loss": 0.1, "perf/weight_sync_s": 1.5,
           "mismatch/abs_ratio_minus_1": 1.2e-2}  # bf16 on both sides
    if shift is not None:
        row |= {"sync/served_logprob_shift": shift, "sync/served_logprob_noise": noise}
    return row


def test_every_step_moved_the_served_logprobs(tmp_path):
    # step N's line carries the probe of the sync after step N-1: none on step 1
    out = report(tmp_path / "run", [step(1, None), step(2, 0.03, 1e-3), step(3, 0.01, 2e-3)])
    assert out["served_logprobs_changed"] is True and out["served_logprob_shift"] == [0.03, 0.01]
    assert out["step_time_s"] == [20.0, 20.0] and out["merged_sync_s"] == [1.5, 1.5, 1.5]
    assert {t["name"]: t["met"] for t in out["targets"]} == {
        "steps_completed": True, "merged_sync_s_median": True, "mismatch_max": True, "served_logprobs_changed": True}


@pytest.mark.parametrize("rows", [
    [step(1, None), step(2, 1e-3, 1e-3), step(3, 0.02)],  # a sync that moved nothing beyond the noise
    [step(1, None), step(2, None), step(3, 0.02)],  # a line without a probe
    [step(1, None)],  # one step: no sync was probed
    [],
])
def test_a_sync_that_did_not_show_is_not_counted_as_changed(tmp_path, rows):
    assert report(tmp_path / "run", rows)["served_logprobs_changed"] is False


def test_a_bf16_mismatch_passes_and_a_stale_policy_does_not(tmp_path):
    rows = [step(1, None), step(2, 0.03, 1e-3), step(3, 0.01, 2e-3)]
    ok = report(tmp_path / "ok", rows)
    assert {t["name"]: t["met"] for t in ok["targets"]}["mismatch_max"]
    stale = [r | {"mismatch/abs_ratio_minus_1": 0.08} for r in rows]
    out = report(tmp_path / "stale", stale)
    assert not {t["name"]: t["met"] for t in out["targets"]}["mismatch_max"]
