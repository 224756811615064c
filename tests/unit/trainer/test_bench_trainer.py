"""bench/trainer.py's pure parts: the `targets` rows from its figures (the FLOP-fraction row included) and the
`--cores` split between vLLM and the trainer."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("trainer")
    finally:
        sys.path.remove(str(BENCH))


def figures(frac: float | None, sync_step: float | None = 10.0) -> dict:
    return {"trainer_matmul_dtype": "bfloat16",
            "async": {"step_s_median": 7.0, "trainer_fwd_bwd_tok_s_median": 90.0, "mismatch_on_policy_max": 1e-5,
                      "trainer_fwd_bwd": {"fraction_of_matmul_peak": frac}},
            "merged_sync": {"p50_s": 1.9, "max_s": 2.5},
            "plain_fwd_bwd": {"under_rollout_load_tok_s": 100.0, "idle_tok_s": 120.0},
            "sync": {"step_s_median": sync_step} if sync_step else None}


def test_targets_judge_each_figure(bench):
    out = figures(0.41)
    rows = {r["name"]: r for r in bench.targets(out)}
    assert rows["trainer_fwd_bwd_flop_fraction_of_matmul_peak"]["met"] is True
    assert "bfloat16" in rows["trainer_fwd_bwd_flop_fraction_of_matmul_peak"]["target"]
    assert rows["async_over_sync_step_time"]["value"] == 0.7 and rows["async_over_sync_step_time"]["met"] is True
    assert rows["trainer_over_plain_fwd_bwd_same_load"]["value"] == 0.9
    assert rows["merged_weight_sync_s_max"]["met"] is False
    assert rows["merged sync <= 2 s"]["value"] == 1.9 and rows["merged sync <= 2 s"]["met"] is True
    assert "perf/weight_sync_s" in rows["merged sync <= 2 s"]["target"]
    assert out["trainer_over_plain_idle_fwd_bwd"] == 0.75


def test_a_slow_or_missing_sync_and_a_skipped_plain_run_are_not_met(bench):
    out = figures(0.41)
    out["merged_sync"], out["plain_fwd_bwd"] = {"p50_s": 2.01, "max_s": 2.01}, None
    rows = {r["name"]: r for r in bench.targets(out)}
    assert rows["merged sync <= 2 s"]["met"] is False
    assert rows["trainer_over_plain_fwd_bwd_same_load"] == {"name": "trainer_over_plain_fwd_bwd_same_load",
                                                            "value": None, "target": ">= 0.8", "met": False}
    out["merged_sync"] = {"p50_s": None, "max_s": None}
    assert {r["name"]: r for r in bench.targets(out)}["merged sync <= 2 s"]["met"] is False


def test_sync_figures_are_the_logged_sync_and_its_split(bench, tmp_path):
    rows = [{"perf/weight_sync_s": 3.0, "perf/weight_sync_write_s": 1.0, "perf/weight_sync_reload_s": 0.8},
            {"perf/weight_sync_s": 1.5, "perf/weight_sync_write_s": 0.3, "perf/weight_sync_reload_s": 0.7},
            {"perf/weight_sync_s": 1.7, "perf/weight_sync_write_s": 0.4, "perf/weight_sync_reload_s": 0.6},
            {"loss": 1.0}]  # a line without a sync counts in no figure
    got = bench.sync_figures(rows, tmp_path / "merged")
    assert got["per_step_s"] == [3.0, 1.5, 1.7] and got["p50_s"] == 1.7 and got["max_s"] == 3.0
    assert (got["write_s_p50"], got["reload_s_p50"], got["rest_s_p50"]) == (0.4, 0.7, 0.7)
    assert got["directory"] == str(tmp_path / "merged") and got["tmpfs"] is False
    from fathom.trainer.merged_dir import SHM

    assert bench.sync_figures(rows, SHM / "fathom-async-0123456789")["tmpfs"] is True
    assert bench.sync_figures([], None)["p50_s"] is None


def test_a_missing_or_low_fraction_or_ratio_is_not_met(bench):
    for frac in (0.39, None):
        rows = {r["name"]: r for r in bench.targets(figures(frac, sync_step=None))}
        assert rows["trainer_fwd_bwd_flop_fraction_of_matmul_peak"]["met"] is False
        assert rows["async_over_sync_step_time"] == {"name": "async_over_sync_step_time", "value": None,
                                                     "target": "<= 0.769", "met": False}


def test_cores_split(bench):
    assert bench.split_cores("0") == ([0], "nobind", "")
    assert bench.split_cores("0-1") == ([0, 1], "0", "1")
    assert bench.split_cores("0-4") == ([0, 1, 2, 3, 4], "0,1", "2,3,4")


def test_overlap_floor_is_the_longer_part_over_the_sum(bench):
    sync = {"fwd_bwd_s_median": 70.0, "weight_sync_s_median": 10.0, "rollout_wait_s_median": 20.0}
    assert bench.overlap_floor(sync) == 0.8  # training 80 s of a 100 s step: async can save at most the 20 s
    assert bench.overlap_floor({**sync, "rollout_wait_s_median": 80.0}) == 0.5
    assert bench.overlap_floor(sync, shared=True) == 1.0  # one core: training and sampling queue for it
    assert bench.overlap_floor(None) is None
    assert bench.overlap_floor({"fwd_bwd_s_median": None, "rollout_wait_s_median": 1.0}) is None
