"""bench/learning_seeds.py: the seed runs' plan, and its aggregation over hand-built run directories."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fathom.eval.stages import summarize_stages

ROOT = Path(__file__).resolve().parents[3]
TASKS = [f"t{i}" for i in range(100)]


def _seeds():
    spec = importlib.util.spec_from_file_location("bench_learning_seeds", ROOT / "bench" / "learning_seeds.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _summary(correct: dict[str, bool]) -> dict:
    n, k = len(correct), sum(correct.values())
    return {"pass@1": {"pass@1": k / n, "ci": [0.0, 1.0], "n": n}, "unscorable": 0, "n": n,
            "tokens": {"mean_total": 100.0}, "by_family": {}}


def _rollouts(halves: dict[str, tuple[tuple[int, int], tuple[int, int]]]) -> list[dict]:
    """Rollout records whose first half (by time) and second half hold (right, n) per family."""
    first, second = [], []
    for fam, ((r1, n1), (r2, n2)) in halves.items():
        first += [{"task_id": f"{fam}-2k-s{i}", "reward/correct": float(i < r1)} for i in range(n1)]
        second += [{"task_id": f"{fam}-2k-s{i}", "reward/correct": float(i < r2)} for i in range(n2)]
    assert len(first) == len(second)  # the bench splits at the middle rollout
    return [r | {"time": t} for t, r in enumerate(first + second)]


def _run(d: Path, seed: int, grpo_right: int, halves: dict, *, sft_right: int = 30, split: str = "test",
         adapter: str = "/a/sft") -> Path:
    per = {"init": {t: i < sft_right for i, t in enumerate(TASKS)},
           "grpo": {t: i < grpo_right for i, t in enumerate(TASKS)}}
    s = summarize_stages(per, {k: _summary(v) for k, v in per.items()}, boot={"n": 500, "seed": 0},
                         beyond_fraction=0.5, wall_s=0)
    (d / "eval").mkdir(parents=True)
    (d / "eval" / "summary.json").write_text(json.dumps(s | {"n_tasks": 100, "split": split}))
    (d / "config.resolved.json").write_text(json.dumps({"policy_server": {"seed": seed}, "trainer": {"init_adapter": adapter},
                                                        "eval": {"concurrency": 32}}))
    (d / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rollouts(halves)))
    (d / "launch.json").write_text(json.dumps({"wall_s": 1200}))
    return d


RISING = {"needle": ((5, 8), (6, 8)), "kv_chain": ((2, 8), (4, 8)), "code_qa": ((0, 4), (0, 4))}
FALLING = {"needle": ((6, 8), (4, 8)), "kv_chain": ((2, 8), (4, 8)), "code_qa": ((0, 4), (0, 4))}


def test_three_seeds_that_all_gain_meet_every_target(tmp_path: Path) -> None:
    dirs = [_run(tmp_path / f"seed-{k}", k, g, h) for k, g, h in ((0, 45, RISING), (1, 42, RISING), (2, 31, FALLING))]
    out = _seeds().aggregate(dirs)
    g = out["grpo_minus_sft"]
    assert g["mean"] == pytest.approx((0.15 + 0.12 + 0.01) / 3) and g["min"] == pytest.approx(0.01)
    assert g["std"] == pytest.approx(0.0737, abs=1e-4) and g["n_seeds"] == 3
    # +0.01 (one task of 100) has an interval reaching 0: two of three seeds above 0
    assert [s["ci_above_0"] for s in out["seeds"]] == [True, True, False] and out["share_ci_above_0"] == pytest.approx(2 / 3)
    # code_qa was never right: left out; needle fell in seed 2
    assert out["seeds"][2]["training_curve"] == {"families": {"needle": False, "kv_chain": True}, "rises": False}
    assert out["seeds_rising_by_start"] == 2  # hand-built records without wall_s: start order = finish order
    assert out["seeds"][0]["pass@1"] == {"sft": 0.30, "grpo": 0.45} and out["seeds"][0]["seed"] == 0
    met = {t["name"]: t["met"] for t in out["targets"]}
    assert met == {"grpo_minus_sft_mean": True, "seeds_with_paired_ci_above_0": True,
                   "seeds_training_success_rises": True, "scored_split": True}


def test_targets_fail_on_too_few_seeds_a_losing_mean_or_the_heldout_split(tmp_path: Path) -> None:
    two = [_run(tmp_path / "a" / f"seed-{k}", k, 50, RISING) for k in range(2)]
    met = {t["name"]: t["met"] for t in _seeds().aggregate(two)["targets"]}
    assert not met["seeds_with_paired_ci_above_0"] and not met["seeds_training_success_rises"]
    losing = [_run(tmp_path / "b" / f"seed-{k}", k, g, FALLING, split="heldout") for k, g in enumerate((25, 28, 33))]
    met = {t["name"]: t["met"] for t in _seeds().aggregate(losing)["targets"]}
    assert met == {"grpo_minus_sft_mean": False, "seeds_with_paired_ci_above_0": False,
                   "seeds_training_success_rises": False, "scored_split": False}


def test_a_family_missing_from_one_half_cannot_show_a_rise() -> None:
    rises = _seeds().curve_rises({"by_family": {"needle": {"first": {"correct": 2, "n": 4}, "second": {"correct": 0, "n": 0}}}})
    assert rises == {"families": {"needle": False}, "rises": False}
    assert _seeds().curve_rises(None) == {"families": {}, "rises": False}


def _control(d: Path, halves: dict) -> Path:
    """A finished frozen-policy control: GRPO rollouts only, no evaluation."""
    d.mkdir(parents=True)
    (d / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rollouts(halves)))
    (d / "launch.json").write_text(json.dumps({"wall_s": 500}))
    return d


def test_the_curve_is_read_against_the_frozen_policy_on_the_same_tasks(tmp_path: Path) -> None:
    # The second half's tasks are harder: the frozen SFT policy drops from 6/8 to 2/8 on needle. The seed's
    # needle falls less (6/8 -> 4/8), so against the control it rose; kv_chain gained 2 where the control gained 3.
    seed_halves = {"needle": ((6, 8), (4, 8)), "kv_chain": ((2, 8), (4, 8)), "code_qa": ((0, 4), (0, 4))}
    ctrl_halves = {"needle": ((6, 8), (2, 8)), "kv_chain": ((1, 8), (4, 8)), "code_qa": ((0, 4), (0, 4))}
    dirs = [_run(tmp_path / f"seed-{k}", k, 40, seed_halves) for k in range(3)]
    out = _seeds().aggregate(dirs)
    assert out["seeds_rising_vs_control"] is None and out["seeds"][0]["training_curve_vs_control"] is None
    for k in range(3):
        _control(tmp_path / f"control-{k}", ctrl_halves if k < 2 else seed_halves)
    out = _seeds().aggregate(dirs)
    row = out["seeds"][0]
    assert row["training_curve"]["families"]["needle"] is False  # halves alone: a fall
    assert row["training_curve_vs_control"] == {"families": {"needle": True, "kv_chain": False}, "rises": False}
    # seed 2's control is itself: every family equals its control
    assert out["seeds"][2]["training_curve_vs_control"] == {"families": {"needle": True, "kv_chain": True},
                                                             "rises": True}
    assert out["seeds_rising_vs_control"] == 1
    assert row["training_control"]["by_family"]["needle"]["second"] == {"correct": 2, "n": 8}


def test_runs_that_are_not_seeds_of_one_recipe_are_refused(tmp_path: Path) -> None:
    mod = _seeds()
    dirs = [_run(tmp_path / "seed-0", 0, 40, RISING), _run(tmp_path / "seed-1", 1, 40, RISING, adapter="/b/sft")]
    with pytest.raises(mod.SeedsError, match="differ in sft_adapter"):
        mod.aggregate(dirs)
    with pytest.raises(mod.SeedsError, match="did not finish"):
        mod.aggregate([tmp_path / "seed-9"])


def _bench(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(ROOT / "bench" / "learning_seeds.py"), *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)


def test_dry_run_prints_each_seeds_launch_and_runs_nothing(tmp_path: Path) -> None:
    adapter = tmp_path / "sft" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    _run(tmp_path / "out" / "seed-1", 1, 40, RISING)  # finished earlier: not run again
    out = _bench("--sft-adapter", str(adapter), "--out", str(tmp_path / "out"), "--n-tasks", "50", "--dry-run",
                 "--trainer.temperature", "1.0")
    assert out.returncode == 0, out.stderr + out.stdout
    plan = json.loads(out.stdout)
    assert [s["status"] for s in plan["seeds"]] == ["to run", "done", "to run"] and plan["split"] == "test"
    cmd = plan["seeds"][2]["command"]
    for piece in ("--split test", f"--trainer.init_adapter {adapter}", "--launch.eval_base false",
                  "--policy_server.seed 2", "--trainer.seed 2", "--eval.n_tasks 50", "--trainer.temperature 1.0",
                  f"--output_dir {tmp_path / 'out'} --run_name seed-2"):
        assert piece in cmd
    # launch's own plan for seed 0: no SFT stage, and the evaluation scores init and GRPO on the test split
    steps = plan["launch_plan_seed_0"]
    assert not any(" stage sft:" in x for x in steps)
    ev = next(x for x in steps if " stage eval:" in x)
    assert "--stage base" not in ev and f"--stage init={adapter}" in ev and "--eval.split test" in ev
    assert "--trainer.task_order_seed" not in cmd  # the shipped task order unless asked
    assert not (tmp_path / "out" / "seed-0").exists()  # nothing ran
    shuffled = _bench("--sft-adapter", str(adapter), "--out", str(tmp_path / "out2"), "--seeds", "2",
                      "--shuffle-tasks", "--dry-run")
    assert shuffled.returncode == 0, shuffled.stderr + shuffled.stdout
    assert "--trainer.task_order_seed 1" in json.loads(shuffled.stdout)["seeds"][1]["command"]
    assert json.loads(shuffled.stdout)["controls"] == []
    controlled = _bench("--sft-adapter", str(adapter), "--out", str(tmp_path / "out3"), "--seeds", "2", "--control",
                        "--dry-run", "--trainer.learning_rate", "1e-4")
    assert controlled.returncode == 0, controlled.stderr + controlled.stdout
    ctrl = json.loads(controlled.stdout)["controls"][1]
    assert ctrl["status"] == "to run" and ctrl["run_dir"] == str(tmp_path / "out3" / "control-1")
    # GRPO only, the same rollout seed, and the frozen rate after (so over) the recipe's own
    assert "--run_name control-1" in ctrl["command"] and "--launch.stages '[\"grpo\"]'" in ctrl["command"]
    assert "--policy_server.seed 1" in ctrl["command"]
    assert ctrl["command"].endswith("--trainer.learning_rate 1e-4 --trainer.learning_rate 1e-12")


def test_a_bad_adapter_or_split_is_named_before_anything_runs(tmp_path: Path) -> None:
    out = _bench("--sft-adapter", str(tmp_path / "nothing"), "--dry-run")
    assert out.returncode == 1 and "not an adapter directory" in json.loads(out.stdout)["error"]
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    out = _bench("--sft-adapter", str(adapter), "--split", "tset", "--out", str(tmp_path / "o"))
    assert out.returncode == 1 and "'tset' is unknown" in json.loads(out.stdout)["error"]
    assert not (tmp_path / "o").exists()
