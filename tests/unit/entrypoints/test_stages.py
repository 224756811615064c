"""The main job's final numbers: stage specs, paired stage-to-stage deltas, and bench/learning.py's targets."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import typer
import pytest

from fathom.entrypoints.stages_cmd import parse_stages
from fathom.eval.stages import stage_tasks, summarize_stages

ROOT = Path(__file__).resolve().parents[3]


def _summary(correct: dict[str, bool]) -> dict:
    n = len(correct)
    k = sum(correct.values())
    return {"pass@1": {"pass@1": k / n, "ci": [0.0, 1.0], "n": n}, "unscorable": 0, "n": n,
            "tokens": {"mean_total": 100.0}, "by_family": {}}


def test_stage_specs() -> None:
    assert parse_stages(["base", "sft=/a", "grpo=/b"]) == [("base", None), ("sft", "/a"), ("grpo", "/b")]
    for bad in (["sft"], ["base", "base"], ["x="], ["=y"]):
        with pytest.raises(typer.Exit):
            parse_stages(bad)


def test_each_stage_is_paired_with_the_one_before_and_the_first() -> None:
    tasks = [f"t{i}" for i in range(10)]
    per = {"base": {t: False for t in tasks}, "sft": {t: i < 6 for i, t in enumerate(tasks)},
           "grpo": {t: i < 8 for i, t in enumerate(tasks)}}
    out = summarize_stages(per, {k: _summary(v) for k, v in per.items()}, boot={"n": 500, "seed": 0},
                           beyond_fraction=0.9, wall_s=12.34)
    assert set(out["paired"]) == {"sft-base", "grpo-sft", "grpo-base"}
    assert out["paired"]["sft-base"]["delta"] == pytest.approx(0.6)
    assert out["paired"]["grpo-sft"]["delta"] == pytest.approx(0.2)
    assert out["paired"]["grpo-sft"]["only_adapter"] == 2 and out["paired"]["grpo-sft"]["only_base"] == 0
    assert out["stages"]["grpo"]["pass@1"]["pass@1"] == pytest.approx(0.8)


def _learning():
    spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "bench" / "learning.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_learning_bench_reads_the_run_and_judges_each_target(tmp_path: Path) -> None:
    tasks = [f"t{i}" for i in range(100)]
    per = {"base": {t: i < 5 for i, t in enumerate(tasks)}, "sft": {t: i < 45 for i, t in enumerate(tasks)},
           "grpo": {t: i < 47 for i, t in enumerate(tasks)}}
    s = summarize_stages(per, {k: _summary(v) for k, v in per.items()}, boot={"n": 500, "seed": 0},
                         beyond_fraction=0.8, wall_s=0)
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "summary.json").write_text(json.dumps(s | {"n_tasks": 100, "split": "heldout"}))
    (tmp_path / "launch.json").write_text(json.dumps({"wall_s": 45 * 60, "step_s": {"policy": 60, "grpo": 1500}}))
    out = _learning().evaluate(tmp_path)
    met = {t["name"]: t["met"] for t in out["targets"]}
    assert out["step_min"] == {"policy": 1.0, "grpo": 25.0}
    assert met == {"sft_minus_base_pass1": True, "grpo_minus_sft_paired_ci_low": False, "demo_wall_min": False,
                   "beyond_window_fraction": True, "heldout_tasks": True,
                   # No per-family figures in this run: reported, unmet.
                   "every_family_grpo_pass1_min": False, "bios_base_pass1": False, "bios_sft_pass1": False,
                   "bios_grpo_minus_sft_paired_ci_low": False, "bios_grpo_called_llm_share": False,
                   "code_families_grpo_llm_calls_per_episode_max": False}
    assert out["start_stage"] == "sft"
    assert out["split"] == "heldout" and "reporting" in out["split_use"]
    with pytest.raises(FileNotFoundError, match="make demo"):
        _learning().evaluate(tmp_path / "nothing")


def test_learning_bench_reads_a_run_started_from_an_earlier_adapter(tmp_path: Path) -> None:
    # `fathom launch --trainer.init_adapter DIR` skips SFT and labels the starting adapter `init`.
    tasks = [f"t{i}" for i in range(100)]
    per = {"base": {t: False for t in tasks}, "init": {t: i < 30 for i, t in enumerate(tasks)},
           "grpo": {t: i < 50 for i, t in enumerate(tasks)}}
    s = summarize_stages(per, {k: _summary(v) for k, v in per.items()}, boot={"n": 500, "seed": 0},
                         beyond_fraction=0.8, wall_s=0)
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "summary.json").write_text(json.dumps(s | {"n_tasks": 100, "split": "heldout"}))
    out = _learning().evaluate(tmp_path)
    value = {t["name"]: t["value"] for t in out["targets"]}
    assert out["start_stage"] == "init"
    assert value["sft_minus_base_pass1"] == pytest.approx(0.30)
    assert value["grpo_minus_sft_paired_ci_low"] == pytest.approx(out["paired"]["grpo-init"]["ci"][0])
    assert value["grpo_minus_sft_paired_ci_low"] > 0


def test_the_base_stage_can_run_on_a_prefix_and_pairs_over_it() -> None:
    ids = [f"t{i}" for i in range(10)]
    assert stage_tasks(ids, None, 4) == ids[:4]
    assert stage_tasks(ids, "runs/x/sft/adapter", 4) == ids
    assert stage_tasks(ids, None, None) == ids
    per = {"base": {t: False for t in ids[:4]}, "sft": {t: t in ("t0", "t1", "t5") for t in ids}}
    out = summarize_stages(per, {k: _summary(v) for k, v in per.items()}, boot={"n": 200, "seed": 0},
                           beyond_fraction=0.5, wall_s=1)
    assert out["paired"]["sft-base"]["n"] == 4 and out["paired"]["sft-base"]["delta"] == 0.5


def test_stage_progress_lines_carry_the_stage_label(capsys) -> None:
    """Merged-weight stages all run under the one served name; their progress lines name the stage instead."""
    from types import SimpleNamespace

    from fathom.eval.run import progress as _progress

    ok = SimpleNamespace(task_id="needle-2k-s1", status="done", stop_reason="final", reward=0.7,
                         reward_components=SimpleNamespace(correct=True))
    crashed = SimpleNamespace(task_id="pairs-4k-s2", status="error", stop_reason="env_error", reward=None,
                              reward_components=None)
    on_result = _progress(2, "grpo")
    on_result("fathom-base", ok)
    on_result("fathom-base", crashed)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("[grpo] 1/2 needle-2k-s1: done") and "correct so far 1, unscorable 0" in lines[0]
    assert lines[1].startswith("[grpo] 2/2 pairs-4k-s2: error") and "correct so far 1, unscorable 1" in lines[1]
    _progress(1)("base", ok)
    assert capsys.readouterr().err.startswith("[base] 1/1")


def test_stage_header_names_the_stage_not_the_served_name() -> None:
    """Under merged sync every stage is served as the base's name, so a header that named the served model said
    "evaluating fathom-base" before the SFT stage's episodes."""
    from fathom.eval.run import header as _header
    from fathom.eval.runner import EvalTarget

    served = EvalTarget("http://env", "http://proxy", "fathom-base", label="fathom-base")
    assert _header([served], 100, "sft") == "evaluating sft (served as fathom-base) on 100 tasks"
    lora = EvalTarget("http://env", "http://proxy", "fathom-ckpt-1", label="ckpt")
    base = EvalTarget("http://env", "http://proxy", "fathom-base", label="base")
    assert _header([base, lora], 30) == "evaluating base, ckpt on 30 tasks"


def test_learning_bench_reads_training_success_by_half_and_by_phrasing(tmp_path: Path) -> None:
    from fathom.tasks.generate import get_task, question_phrasing

    ids = [f"needle-2k-s{s}" for s in range(40)]
    saw = next(t for t in ids if question_phrasing(get_task(t)) == 0)
    other = next(t for t in ids if question_phrasing(get_task(t)) == 5)
    # In finishing order: the first half is right once in 3 (the SFT phrasing), the second twice (the other one).
    rows = [(saw, 1.0), (saw, 0.0), (other, 0.0), (other, 1.0), (other, 1.0), ("kv_chain-2k-s3", 0.0)]
    lines = [{"time": 100.0 + i, "task_id": t, "reward/correct": c, "unscorable": False}
             for i, (t, c) in enumerate(rows)]
    lines.insert(2, {"time": 101.5, "task_id": other, "unscorable": True, "reward": None})
    lines.append({"time": 200.0, "task_id": other, "unscorable": True, "reward": None, "stop_reason": "cancelled"})
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reversed(lines)))
    (tmp_path / "config.resolved.json").write_text(json.dumps({"sft": {"question_phrasings": {"needle": [0, 1]}}}))
    out = _learning().training(tmp_path)
    assert out["rollouts"] == 8 and out["unscorable"] == 1 and out["cancelled_at_stop"] == 1
    assert out["by_family"]["needle"] == {"first": {"correct": 1, "n": 3}, "second": {"correct": 2, "n": 2}}
    assert out["by_family"]["kv_chain"] == {"first": {"correct": 0, "n": 0}, "second": {"correct": 0, "n": 1}}
    needle = out["by_phrasing"]["needle"]
    assert needle["sft_saw"] == {"first": {"correct": 1, "n": 2}, "second": {"correct": 0, "n": 0}}
    assert needle["grpo_only"] == {"first": {"correct": 0, "n": 1}, "second": {"correct": 2, "n": 2}}
    assert set(out["by_phrasing"]) == {"needle"}
    (tmp_path / "config.resolved.json").write_text(json.dumps({"sft": {"question_phrasings": {}}}))
    assert "by_phrasing" not in _learning().training(tmp_path)
    assert _learning().training(tmp_path / "no-grpo") is None


def test_learning_bench_also_splits_the_halves_by_start_time(tmp_path: Path) -> None:
    # Two waves of the same policy, started at t=0 and t=50, each one quick right answer (10 s) and one wrong
    # episode that ran to the turn limit (100 s). By finish time both right answers come first and the curve
    # "falls" from 2/2 to 0/2; by start time each half is one wave, 1/2 and 1/2.
    rows = [(10.0, 10.0, 1.0), (60.0, 10.0, 1.0), (100.0, 100.0, 0.0), (150.0, 100.0, 0.0)]
    (tmp_path / "rollouts.jsonl").write_text("".join(
        json.dumps({"time": t, "wall_s": w, "task_id": "needle-2k-s1", "reward/correct": c}) + "\n"
        for t, w, c in rows))
    out = _learning().training(tmp_path)
    assert out["by_family"]["needle"] == {"first": {"correct": 2, "n": 2}, "second": {"correct": 0, "n": 2}}
    assert out["by_family_started"]["needle"] == {"first": {"correct": 1, "n": 2}, "second": {"correct": 1, "n": 2}}


def test_a_merged_weight_stage_is_labelled_by_stage_with_the_served_name_beside_it(tmp_path: Path) -> None:
    """Under merged reload every stage is served as the base's name: results, report.html and the model card must
    still say `grpo`, not `fathom-base`."""
    import re

    from fathom.config import load_config
    from fathom.eval.run import eval_plan
    from fathom.eval.evaluate import build_results
    from fathom.eval.report import write_outputs
    from fathom.protocol import EpisodeLimits, Sampling
    from tests.unit.eval.episodes import episode

    cfg = load_config(None, [])
    [(target, adapter)] = eval_plan(cfg, "http://env", "http://proxy", model="fathom-base", label="grpo")
    assert (target.label, target.model, adapter) == ("grpo", "fathom-base", None)
    assert eval_plan(cfg, "http://env", "http://proxy", model="fathom-base")[0][0].label == "fathom-base"
    ids = ["needle-1k-s1000000", "kv_chain-2k-s1000001"]
    eps = {"grpo": [episode(t, "correct", eid=f"g-{t}") for t in ids]}
    res = build_results(eps, targets=[target], split="heldout", task_ids=ids, sampling=Sampling(temperature=0.0),
                        limits=EpisodeLimits(max_depth=2), max_model_len=4096, bootstrap=50)
    assert res["models"]["grpo"]["model"] == "fathom-base"
    html = write_outputs(res, eps, tmp_path / "grpo")["report"].read_text()
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', html, re.S).group(1))
    assert data["models"] == {"grpo": {"model": "fathom-base", "summary": res["models"]["grpo"]["summary"]}}
    assert "<title>FATHOM eval: grpo</title>" in html and "served as" in html


def _family_summary(correct: dict[str, bool], calls: dict[str, int]) -> dict:
    """A stage summary with per-family pass@1 and selectivity, as metrics.summarize writes them."""
    from fathom.eval.metrics import summarize

    rows = [{"task_id": t, "family": t.split("-")[0], "length": 4096, "scorable": True, "correct": ok, "reward": 0.0,
             "llm_calls": calls.get(t, 0), "sub_tokens": 50 * calls.get(t, 0), "total_tokens": 500, "root_tokens": 450,
             "subcalls_by_depth": {}, "repl_errors": 0, "no_code_turns": 0, "truncated_turns": 0,
             "format_failure": False, "stop_reason": "final", "error": None, "wall_s": 1.0,
             "program_family": t.split("-")[0] if ok else None}  # the right program exactly when right
            for t, ok in correct.items()]
    return summarize(rows, max_model_len=4096, boot={"n": 200, "seed": 0})


def test_learning_bench_judges_the_per_family_and_selectivity_targets(tmp_path: Path) -> None:
    bios = [f"bios-4k-s{i}" for i in range(40)]
    needle = [f"needle-4k-s{i}" for i in range(40)]
    per = {"base": {**{t: False for t in bios}, **{t: i < 2 for i, t in enumerate(needle)}},
           "sft": {**{t: i < 14 for i, t in enumerate(bios)}, **{t: i < 20 for i, t in enumerate(needle)}},
           "grpo": {**{t: i < 30 for i, t in enumerate(bios)}, **{t: i < 22 for i, t in enumerate(needle)}}}
    calls = {"base": {}, "sft": {t: 1 for t in bios[:30]}, "grpo": {**{t: 1 for t in bios[:35]}, needle[0]: 2}}
    s = summarize_stages(per, {k: _family_summary(v, calls[k]) for k, v in per.items()},
                         boot={"n": 500, "seed": 0}, beyond_fraction=0.8, wall_s=0)
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "summary.json").write_text(json.dumps(s | {"n_tasks": 80, "split": "heldout"}))
    out = _learning().evaluate(tmp_path)
    got = {t["name"]: (t["value"], t["met"]) for t in out["targets"]}
    assert got["every_family_grpo_pass1_min"] == (pytest.approx(22 / 40), True)
    assert got["bios_base_pass1"] == (0.0, True)
    assert got["bios_sft_pass1"] == (pytest.approx(14 / 40), True)
    assert got["bios_grpo_minus_sft_paired_ci_low"][1] is True and got["bios_grpo_minus_sft_paired_ci_low"][0] > 0
    assert got["bios_grpo_called_llm_share"] == (pytest.approx(35 / 40), True)
    assert got["code_families_grpo_llm_calls_per_episode_max"] == (pytest.approx(2 / 40), True)
    with_calls = out["selectivity"]["grpo"]["bios"]["with_subcalls"]
    assert with_calls == {"correct": 30, "n": 35, "pass@1": pytest.approx(30 / 35)}
    assert out["paired_by_family"]["grpo-sft"]["needle"]["delta"] == pytest.approx(2 / 40)
    assert out["by_family"]["sft"]["bios"] == pytest.approx(14 / 40)
    assert out["routing"]["sft"] == {"needle": "20/40", "bios": "14/40"}
    assert out["routing_wrote"]["grpo"]["bios"] == {"none": 10}
