"""Does GRPO beat its SFT start across rollout seeds? Runs GRPO N times from one SFT adapter and prints one JSON object.

    python bench/learning_seeds.py --sft-adapter runs/smoke/sft/adapter                # 3 seeds, test split
    python bench/learning_seeds.py --sft-adapter DIR --dry-run                         # the plan; nothing runs
    python bench/learning_seeds.py --sft-adapter DIR --out runs/seeds-t1 --trainer.temperature 1.0
    python bench/learning_seeds.py --sft-adapter DIR --control                         # plus a frozen-policy run a seed
    python bench/learning_seeds.py --aggregate --out runs/seeds                        # read finished seeds only

Each seed is one `fathom launch CONFIG` with the SFT stage skipped (`--trainer.init_adapter`), the base stage left
out of the evaluation (`--launch.eval_base false`), and its own rollout seed: vLLM's sampling seed
(`--policy_server.seed`) and the trainer's (`--trainer.seed`); `--shuffle-tasks` also gives each seed its own
order of the training tasks (`--trainer.task_order_seed`). So every seed trains GRPO from the same adapter and
scores SFT and GRPO on the same tasks of `--split` (default `test`, the split recipes are chosen on:
docs/main_job.md), paired within its own run. Extra `--section.key value` arguments go to every launch, which is
how a recipe change is measured across seeds. A seed whose run directory already holds `eval/summary.json` is
not run again, so an interrupted series resumes.

The JSON holds each seed's GRPO - SFT paired delta and interval and its training-time success by family (first
half of its rollouts against the second, as bench/learning.py reads it), the mean and spread of the deltas, and
`targets`: the mean above 0, at least two thirds of at least 3 seeds with a paired interval above 0, training-time
success in the second half at least the first on every family with any success in at least two thirds of the
seeds, and the scores on the `test` split.

Training-time success compares different tasks in the two halves (each task is one group), so a half of harder
tasks looks like a falling curve. `--control` also runs, per seed, the same GRPO stage with the policy frozen
(`trainer.learning_rate` 1e-12: Adam moves each weight by about 1e-12, so the SFT policy is served throughout) into
OUT/control-K: the same tasks in the same order, sampled by the SFT policy. Each family's halves are then read
against the control's (`training_curve_vs_control`: the second half's rate minus the control's is at least the first
half's minus the control's), reported beside the targets as `seeds_rising_vs_control`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

class SeedsError(ValueError):
    """The seed runs cannot be compared (different splits, tasks or starting adapters), or one is missing."""


def _learning():
    spec = importlib.util.spec_from_file_location("fathom_bench_learning", Path(__file__).with_name("learning.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def launch_argv(config: str, sft_adapter: str, seed: int, *, out: Path, split: str, n_tasks: int | None,
                extra: list[str], shuffle_tasks: bool = False) -> list[str]:
    """The `fathom launch` command of one seed: GRPO from `sft_adapter`, then SFT and GRPO scored on `split`;
    with `shuffle_tasks` the seed also orders the training tasks (`trainer.task_order_seed`)."""
    argv = [sys.executable, "-m", "fathom.entrypoints.cli", "launch", config, "--split", split,
            "--output_dir", str(out), "--run_name", f"seed-{seed}", "--trainer.init_adapter", sft_adapter,
            "--launch.stages", '["grpo", "eval"]', "--launch.eval_base", "false",
            "--policy_server.seed", str(seed), "--trainer.seed", str(seed)]
    if n_tasks:
        argv += ["--eval.n_tasks", str(n_tasks)]
    if shuffle_tasks:
        argv += ["--trainer.task_order_seed", str(seed)]
    return argv + list(extra)


FROZEN_LR = "1e-12"
"""The control's learning rate: the config requires a rate above 0; at 1e-12 Adam's steps leave the weights as
they were (each moves by about 1e-12, below fp32's resolution of weights of order 1e-2)."""


def control_argv(argv: list[str], seed: int) -> list[str]:
    """A seed's launch turned into its frozen-policy control: GRPO only (no evaluation), at FROZEN_LR, named
    control-K beside the seed's run. Later overrides win, so the control's rate replaces any --trainer.learning_rate in `argv`."""
    argv = list(argv)
    argv[argv.index("--run_name") + 1] = f"control-{seed}"
    argv[argv.index("--launch.stages") + 1] = '["grpo"]'
    return argv + ["--trainer.learning_rate", FROZEN_LR]


def _rate(half: dict) -> float | None:
    return half["correct"] / half["n"] if half["n"] else None


def curve_rises(training: dict | None, key: str = "by_family", control: dict | None = None) -> dict:
    """Per family with any training-time success: did the second half's rate reach the first's? A family with no
    rollout in one half cannot show it and counts as not rising; families never right are left out. `key` picks
    bench/learning.py's halves: by finish time (`by_family`, the target's) or by start time (`by_family_started`).

    With a frozen-policy `control` (the same tasks in the same halves) each half is read against the control's:
    did the second half gain at least as much on the control's second half as the first half did on its first?
    Task difficulty then cancels; a family right in either run counts, and a half empty in either run cannot rise."""
    seed = (training or {}).get(key) or {}
    base = None if control is None else (control.get(key) or {})
    empty = {"correct": 0, "n": 0}
    fams: dict[str, bool] = {}
    for fam in [*seed, *(f for f in base or {} if f not in seed)]:
        runs = [seed.get(fam, {})] + ([] if base is None else [base.get(fam, {})])
        halves = [run.get(h) or empty for run in runs for h in ("first", "second")]
        if sum(h["correct"] for h in halves) == 0:
            continue
        rates = [_rate(h) for h in halves]
        if None in rates:
            fams[fam] = False
            continue
        a, b = rates[:2]
        ca, cb = rates[2:] if base is not None else (0.0, 0.0)
        fams[fam] = b - cb >= a - ca
    return {"families": fams, "rises": bool(fams) and all(fams.values())}


def seed_row(run_dir: Path) -> dict:
    """One seed's figures from its run directory (a finished `fathom launch`), read against its frozen-policy
    control (RUN_PARENT/control-K) where one finished."""
    path = run_dir / "eval" / "summary.json"
    if not path.is_file():
        raise SeedsError(f"{path} does not exist: the seed's run did not finish (run this benchmark again "
                         "without --aggregate to finish it)")
    s = json.loads(path.read_text())
    start = next((k for k in ("init", "sft") if k in s["stages"]), None)
    pair = s["paired"].get(f"grpo-{start}") if start else None
    if pair is None or pair.get("delta") is None:
        raise SeedsError(f"{path} has no paired GRPO - SFT comparison (stages: {', '.join(s['stages'])})")
    cfg_path = run_dir / "config.resolved.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
    training = _learning().training(run_dir)
    seed = cfg.get("policy_server", {}).get("seed")
    control_dir = run_dir.parent / f"control-{seed}"
    control = _learning().training(control_dir) if (control_dir / "launch.json").is_file() else None
    launch = run_dir / "launch.json"
    wall = json.loads(launch.read_text()).get("wall_s") if launch.is_file() else None
    return {
        "run_dir": str(run_dir),
        "seed": seed,
        "task_order_seed": cfg.get("trainer", {}).get("task_order_seed"),
        "split": s.get("split"), "n_tasks": s.get("n_tasks"),
        "sft_adapter": cfg.get("trainer", {}).get("init_adapter"),
        "eval_concurrency": cfg.get("eval", {}).get("concurrency"),
        "pass@1": {"sft": s["stages"][start]["pass@1"]["pass@1"], "grpo": s["stages"]["grpo"]["pass@1"]["pass@1"]},
        "grpo_minus_sft": {"delta": pair["delta"], "ci": pair["ci"], "n": pair["n"]},
        "ci_above_0": bool(pair["ci"]) and pair["ci"][0] > 0,
        "training": training,
        "training_curve": curve_rises(training),
        "training_curve_started": curve_rises(training, "by_family_started"),
        "training_control": control,
        "training_curve_vs_control": None if control is None else curve_rises(training, control=control),
        "wall_min": None if wall is None else round(wall / 60, 1),
    }


def _target(name: str, value, target: str, met: bool) -> dict:
    return {"name": name, "value": value, "target": target, "met": bool(met)}


def aggregate(run_dirs: list[Path]) -> dict:
    """The seeds' rows, the mean and spread of GRPO - SFT, and the targets (module docstring)."""
    if not run_dirs:
        raise SeedsError("no seed run directories to read")
    rows = [seed_row(d) for d in run_dirs]
    for key in ("split", "n_tasks", "sft_adapter", "eval_concurrency"):
        seen = {json.dumps(r[key]) for r in rows}
        if len(seen) > 1:
            raise SeedsError(f"the seed runs differ in {key} ({', '.join(sorted(seen))}): seeds of one recipe start "
                             "from one SFT adapter and are scored on the same tasks at the same concurrency")
    deltas = [r["grpo_minus_sft"]["delta"] for r in rows]
    n = len(rows)
    need = math.ceil(2 * n / 3)
    above = sum(r["ci_above_0"] for r in rows)
    rises = sum(r["training_curve"]["rises"] for r in rows)
    mean = statistics.fmean(deltas)
    split = rows[0]["split"]
    return {
        "split": split, "n_tasks": rows[0]["n_tasks"], "sft_adapter": rows[0]["sft_adapter"], "seeds": rows,
        "grpo_minus_sft": {"mean": mean, "std": statistics.stdev(deltas) if n > 1 else None,
                           "min": min(deltas), "max": max(deltas), "n_seeds": n},
        "share_ci_above_0": above / n,
        # the curve with rollouts ordered by start time (bench/learning.py): where it rises and the target's falls,
        # the fall is the order quick right answers finish in, not the policy
        "seeds_rising_by_start": sum(r["training_curve_started"]["rises"] for r in rows),
        # the curve against the frozen-policy control on the same tasks (--control); None without controls
        "seeds_rising_vs_control": (sum(r["training_curve_vs_control"]["rises"] for r in rows)
                                    if all(r["training_curve_vs_control"] for r in rows) else None),
        "targets": [
            _target("grpo_minus_sft_mean", round(mean, 4), "> 0", mean > 0),
            _target("seeds_with_paired_ci_above_0", above, f">= {need} of {n} (at least 3 seeds)", n >= 3 and above >= need),
            _target("seeds_training_success_rises", rises,
                    f">= {need} of {n}: second half >= first on every family with any success", n >= 3 and rises >= need),
            _target("scored_split", split, "test (the split recipes are chosen on)", split == "test"),
        ],
    }


def _run(argv: list[str]) -> int:
    """One launch, its output on stderr (stdout is this benchmark's JSON). It runs in its own session, so a
    terminal's Ctrl-C reaches only this process, which passes one SIGTERM on: a second signal in the middle of the
    launch's own clean-up could cut it short."""
    proc = subprocess.Popen(argv, stdout=sys.stderr, start_new_session=True)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGTERM)  # the launch unwinds like Ctrl-C: stages and servers stop, then it exits
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


def main() -> None:
    from fathom.unwind import sigterm_unwinds

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sft-adapter", help="The SFT adapter every seed starts from (e.g. runs/smoke/sft/adapter).")
    ap.add_argument("--config", default="configs/smoke.toml")
    ap.add_argument("--seeds", type=int, default=3, help="GRPO runs, with rollout seeds 0..N-1.")
    ap.add_argument("--split", default="test", help="Split every seed scores (default test; docs/main_job.md).")
    ap.add_argument("--n-tasks", type=int, default=None, help="Score the split's first N tasks (default: eval.n_tasks).")
    ap.add_argument("--out", default="runs/seeds", help="Directory of the seed runs (OUT/seed-K).")
    ap.add_argument("--shuffle-tasks", action="store_true",
                    help="Each seed also shuffles the training tasks (trainer.task_order_seed); without it every seed "
                         "trains on the same tasks in the same order, as the shipped recipe does.")
    ap.add_argument("--control", action="store_true",
                    help="Also run each seed's GRPO stage with the policy frozen (OUT/control-K), so the training curve "
                         "is read against the SFT policy's success on the same tasks.")
    ap.add_argument("--dry-run", action="store_true", help="Print the plan (and launch's own plan) and run nothing.")
    ap.add_argument("--aggregate", action="store_true", help="Only read the finished seed runs under --out.")
    args, extra = ap.parse_known_args()
    out = Path(args.out).resolve()
    seeds = list(range(args.seeds))

    def fail(msg: str) -> None:
        print(json.dumps({"error": msg, "targets": []}))
        sys.exit(1)

    if args.aggregate:
        dirs = sorted((p for p in out.glob("seed-*") if (p / "eval" / "summary.json").is_file()),
                      key=lambda p: int(p.name.split("-")[1]) if p.name.split("-")[1].isdigit() else 0)
        try:
            print(json.dumps(aggregate(dirs), indent=2))
        except SeedsError as e:
            fail(str(e))
        return
    if not args.sft_adapter or not (Path(args.sft_adapter) / "adapter_config.json").is_file():
        fail(f"--sft-adapter {args.sft_adapter!r} is not an adapter directory (no adapter_config.json): give the SFT "
             "stage's adapter, e.g. runs/smoke/sft/adapter after `make demo` or "
             "`fathom launch configs/smoke.toml --launch.stages '[\"sft\"]'`")
    if args.seeds < 1:
        fail(f"--seeds {args.seeds}: give at least 1 (the targets need 3)")
    adapter = str(Path(args.sft_adapter).resolve())
    plans = [(k, launch_argv(args.config, adapter, k, out=out, split=args.split, n_tasks=args.n_tasks, extra=extra,
                             shuffle_tasks=args.shuffle_tasks)) for k in seeds]
    controls = [(k, control_argv(argv, k)) for k, argv in plans] if args.control else []
    # launch's own dry run checks the config, the overrides and the split before any seed trains
    check = subprocess.run([*plans[0][1], "--dry-run"], capture_output=True, text=True)
    if check.returncode != 0:
        fail(f"`fathom launch --dry-run` refused seed 0's plan: {(check.stderr or check.stdout).strip()[-2000:]}")
    done = {k: (out / f"seed-{k}" / "eval" / "summary.json").is_file() for k in seeds}
    control_done = {k: (out / f"control-{k}" / "launch.json").is_file() for k in seeds}
    if args.dry_run:
        print(json.dumps({"split": args.split, "out": str(out),
                          "seeds": [{"seed": k, "run_dir": str(out / f"seed-{k}"), "status": "done" if done[k] else "to run",
                                     "command": shlex.join(argv)} for k, argv in plans],
                          "controls": [{"seed": k, "run_dir": str(out / f"control-{k}"),
                                        "status": "done" if control_done[k] else "to run", "command": shlex.join(argv)}
                                       for k, argv in controls],
                          "launch_plan_seed_0": check.stdout.splitlines(), "targets": []}, indent=2))
        return
    sigterm_unwinds()  # `timeout` or a job runner's SIGTERM still stops the running launch and its servers
    runs = [("seed", k, argv, done[k]) for k, argv in plans] + [("control", k, argv, control_done[k]) for k, argv in controls]
    for kind, k, argv, finished in runs:
        name = f"{kind}-{k}"
        if finished:
            print(f"{name}: finished earlier ({out / name}); not run again", file=sys.stderr)
            continue
        t0 = time.monotonic()
        print(f"{name}: {shlex.join(argv)}", file=sys.stderr, flush=True)
        try:
            rc = _run(argv)
        except KeyboardInterrupt:
            fail(f"interrupted during {name}; the finished runs stay in {out} and a rerun resumes")
        if rc != 0:
            fail(f"{name}'s launch exited with status {rc}; its logs are in {out / name / 'logs'}")
        print(f"{name}: done in {(time.monotonic() - t0) / 60:.1f} min", file=sys.stderr, flush=True)
    try:
        print(json.dumps(aggregate([out / f"seed-{k}" for k in seeds]), indent=2))
    except SeedsError as e:
        fail(str(e))


if __name__ == "__main__":
    main()
