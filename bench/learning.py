"""Did the main job teach the model? Reads a finished `fathom launch` run directory and prints one JSON object.

    python bench/learning.py [RUN_DIR]      # default: runs/smoke, the last `make demo`

Figures come from the run's own files: `eval/summary.json` (pass@1 of base, SFT and GRPO on the same tasks of the
split the run scored, reported as `split`, overall and per family; paired bootstrap deltas; each family's llm()
selectivity), `launch.json` (the job's wall time and each step's) and `rollouts.jsonl` (GRPO's training-time
success, first half of the run against the second). Nothing is re-run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _target(name: str, value: float | None, target: str, met: bool) -> dict:
    return {"name": name, "value": value, "target": target, "met": bool(met)}


def _half(rows: list[dict]) -> dict:
    return {"correct": sum(1 for r in rows if r.get("reward/correct")), "n": len(rows)}


def training(run_dir: Path) -> dict | None:
    """GRPO's own rollouts (`rollouts.jsonl`, T and tasks as trained): right answers by family over the scorable
    rollouts that finished in the first half of the run, and in the second. The halves split the whole run at its
    middle rollout, so every family is compared over the same two stretches of training.

    When the run's resolved config keeps SFT to some phrasings (`sft.question_phrasings`), each of those families
    is also split by the rollout's question phrasing: `sft_saw` (a phrasing of SFT's data) or `grpo_only`.
    `unscorable` counts the failed rollouts; `cancelled_at_stop` the ones still running when training ended.
    None when the run has no rollouts (no GRPO stage)."""
    path = run_dir / "rollouts.jsonl"
    if not path.is_file():
        return None
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    scored = sorted((r for r in records if not r.get("unscorable")), key=lambda r: r["time"])
    mid = len(scored) // 2
    halves = {"first": scored[:mid], "second": scored[mid:]}
    # The same halves with the rollouts ordered by when they started (finish time less the episode's wall time). A
    # right answer stops after one turn while a wrong one runs to the turn limit, so by finish time the run's first
    # rollouts lean towards quick right answers; the two orders disagreeing says the halves measure that, not learning.
    started = sorted(scored, key=lambda r: r["time"] - float(r.get("wall_s") or 0.0))
    halves_started = {"first": started[:mid], "second": started[mid:]}
    from fathom.tasks.record import parse_id

    def family(r: dict) -> str:
        return parse_id(r["task_id"])[0]

    # Rollouts still running when training ended are cancelled then (stop reason `cancelled`): not failures.
    cancelled = sum(1 for r in records if r.get("stop_reason") == "cancelled")
    out: dict = {"rollouts": len(records), "unscorable": len(records) - len(scored) - cancelled,
                 "cancelled_at_stop": cancelled, "by_family": {}}
    out["by_family_started"] = {}
    for fam in sorted({family(r) for r in scored}):
        out["by_family"][fam] = {h: _half([r for r in rows if family(r) == fam]) for h, rows in halves.items()}
        out["by_family_started"][fam] = {h: _half([r for r in rows if family(r) == fam])
                                         for h, rows in halves_started.items()}
    config_path = run_dir / "config.resolved.json"
    keep = json.loads(config_path.read_text()).get("sft", {}).get("question_phrasings") if config_path.is_file() else {}
    if keep:
        from fathom.tasks.generate import get_task, question_phrasing

        seen: dict[str, bool] = {}  # task id -> SFT's data used its phrasing (each task generated once)

        def sft_saw(r: dict) -> bool:
            tid = r["task_id"]
            if tid not in seen:
                seen[tid] = question_phrasing(get_task(tid)) in keep[family(r)]
            return seen[tid]

        out["by_phrasing"] = {
            fam: {label: {h: _half([r for r in rows if family(r) == fam and sft_saw(r) == want])
                          for h, rows in halves.items()}
                  for label, want in (("sft_saw", True), ("grpo_only", False))}
            for fam in sorted(set(keep) & set(out["by_family"]))
        }
    return out


LLM_FAMILY = "bios"
"""The family whose answers need an llm() sub-call; the others are solved by code alone."""


def _p1(stage: dict | None, family: str) -> float | None:
    return ((stage or {}).get("by_family") or {}).get(family, {}).get("pass@1")


def _selectivity(stage: dict | None) -> dict:
    return ((stage or {}).get("selectivity") or {}).get("by_family") or {}


def family_targets(s: dict, start: str | None) -> list[dict]:
    """Per-family targets: every family above 0 after GRPO, the llm() family's base/SFT/GRPO figures, and
    selectivity after GRPO (the llm() family calls llm(), the code families barely do). A missing figure (a run
    without that stage or family) is reported, unmet."""
    stages = s["stages"]
    grpo, base, first = stages.get("grpo"), stages.get("base"), stages.get(start) if start else None
    fams = sorted(set((grpo or {}).get("by_family") or {}))
    grpo_p1 = [_p1(grpo, f) for f in fams]
    low = min((v for v in grpo_p1 if v is not None), default=None)
    sel = _selectivity(grpo)
    code_calls = [sel[f]["llm_calls_per_episode"] for f in fams if f != LLM_FAMILY and f in sel
                  and sel[f].get("llm_calls_per_episode") is not None]
    llm = sel.get(LLM_FAMILY, {})
    ci = ((s.get("paired_by_family") or {}).get(f"grpo-{start}") or {}).get(LLM_FAMILY, {}).get("ci")
    b, f1 = _p1(base, LLM_FAMILY), _p1(first, LLM_FAMILY)
    return [
        _target("every_family_grpo_pass1_min", low, "> 0",
                bool(fams) and all(v is not None and v > 0 for v in grpo_p1)),
        _target(f"{LLM_FAMILY}_base_pass1", b, "<= 0.05", b is not None and b <= 0.05),
        _target(f"{LLM_FAMILY}_sft_pass1", f1, ">= 0.30", f1 is not None and f1 >= 0.30),
        _target(f"{LLM_FAMILY}_grpo_minus_sft_paired_ci_low", None if not ci else ci[0], "> 0 (95% paired bootstrap)",
                bool(ci) and ci[0] > 0),
        _target(f"{LLM_FAMILY}_grpo_called_llm_share", llm.get("called_share"), ">= 0.80",
                llm.get("called_share") is not None and llm["called_share"] >= 0.80),
        _target("code_families_grpo_llm_calls_per_episode_max", max(code_calls, default=None), "<= 0.1",
                bool(code_calls) and max(code_calls) <= 0.1),
    ]


def evaluate(run_dir: Path) -> dict:
    from fathom.stack.plan import split_use

    summary_path, launch_path = run_dir / "eval" / "summary.json", run_dir / "launch.json"
    if not summary_path.is_file():
        raise FileNotFoundError(f"{summary_path} does not exist: run `make demo` (or `fathom launch CONFIG`) first")
    s = json.loads(summary_path.read_text())
    stages = {k: v["pass@1"]["pass@1"] for k, v in s["stages"].items()}
    paired = s["paired"]
    # GRPO's starting point is the `sft` stage, or `init` when the run was given `--trainer.init_adapter` (an SFT
    # adapter from an earlier run); both targets read the pair with whichever stage the run has.
    start = next((k for k in ("sft", "init") if k in stages), None)
    sft_base = paired.get(f"{start}-base", {})
    grpo_sft = paired.get(f"grpo-{start}", {})
    launch = json.loads(launch_path.read_text()) if launch_path.is_file() else {}
    wall_s = launch.get("wall_s")
    d_sft = sft_base.get("delta")
    ci = grpo_sft.get("ci")
    return {
        "run_dir": str(run_dir),
        "n_tasks": s["n_tasks"],
        "split": s.get("split"),
        # under the selection protocol (docs/main_job.md): `test` scores choose a recipe, `heldout` scores report one
        "split_use": None if s.get("split") is None else split_use(s["split"]),
        "start_stage": start,
        "pass@1": stages,
        "intervals": {k: v["pass@1"]["ci"] for k, v in s["stages"].items()},
        "paired": {k: {"delta": v["delta"], "ci": v["ci"], "n": v["n"]} for k, v in paired.items()},
        "by_family": {k: {f: p.get("pass@1") for f, p in (v.get("by_family") or {}).items()}
                      for k, v in s["stages"].items()},
        "paired_by_family": {k: {f: {"delta": c["delta"], "ci": c["ci"], "n": c["n"]} for f, c in v.items()}
                             for k, v in (s.get("paired_by_family") or {}).items()},
        # Per family and stage: llm() calls per episode, share of episodes that called it, pass@1 with and without
        # sub-calls, sub-call tokens per episode (fathom/eval/metrics.py, selectivity).
        "selectivity": {k: _selectivity(v) for k, v in s["stages"].items()},
        # Per family and stage: episodes whose first program was their own family's kind, out of n, and what
        # the rest wrote (fathom/eval/metrics.py, routing). Runs scored before it was recorded: {}.
        "routing": {k: {f: f"{r['own']}/{r['n']}" for f, r in (v.get("routing") or {}).items()}
                    for k, v in s["stages"].items()},
        "routing_wrote": {k: {f: r["wrote"] for f, r in (v.get("routing") or {}).items() if r["wrote"]}
                          for k, v in s["stages"].items()},
        "wall_min": None if wall_s is None else round(wall_s / 60, 1),
        # Where the wall time went: each server's start and each stage, in minutes (runs before it was recorded: {}).
        "step_min": {k: round(v / 60, 1) for k, v in launch.get("step_s", {}).items()},
        "training": training(run_dir),
        "targets": [
            _target("sft_minus_base_pass1", d_sft, ">= 0.30", d_sft is not None and d_sft >= 0.30),
            _target("grpo_minus_sft_paired_ci_low", None if not ci else ci[0], "> 0 (95% paired bootstrap)",
                    bool(ci) and ci[0] > 0),
            _target("demo_wall_min", None if wall_s is None else round(wall_s / 60, 1), "<= 40",
                    wall_s is not None and wall_s <= 40 * 60),
            _target("beyond_window_fraction", s["beyond_window_fraction"], ">= 0.25",
                    s["beyond_window_fraction"] >= 0.25),
            _target("heldout_tasks", s["n_tasks"], ">= 100", s["n_tasks"] >= 100),
            *family_targets(s, start),
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", nargs="?", default="runs/smoke")
    args = ap.parse_args()
    try:
        out = evaluate(Path(args.run_dir))
    except FileNotFoundError as e:
        print(json.dumps({"error": str(e), "targets": []}))
        sys.exit(1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
