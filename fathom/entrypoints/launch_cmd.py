"""`fathom launch CONFIG`: the main job. Servers up, then SFT, GRPO and an evaluation, then all down.

The evaluation scores `eval.split` (`--split NAME` sets it for every stage): `test` when choosing a recipe,
`heldout` only to report a chosen one (docs/main_job.md, "How the recipe is chosen").

The plan is a list of steps computed from the config alone (`--dry-run` prints it), so what runs
is what the plan says. Servers and stages are `fathom` subcommands run as supervised children
(`supervisor.py`); the stages reach the servers at the URLs the config gives them. A server that dies is
restarted with backoff and gets back what it forgot (`recovery.py`); see docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import typer

from fathom.entrypoints.common import OVERRIDE_SETTINGS, config_from, die
from fathom.entrypoints.sft_cmd import check_phrasings
from fathom.trainer.anchor import missing_rows, rows_path


@dataclass(frozen=True)
class Step:
    kind: str
    """`server` (kept up, health-checked), `restart` (a running server stopped and started again with new
    arguments) or `stage` (run to completion)."""
    name: str
    argv: list[str]
    health_url: str | None = None


def _local(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def server_urls(cfg) -> dict[str, str]:
    """Base URLs (no /v1) of the policy server, capture proxy and env server as the config places them: where
    the proxy forwards (`capture_proxy.upstream_url`) and where episodes record (`env_server.proxy_url`) when set."""
    ps, pc, es = cfg.policy_server, cfg.capture_proxy, cfg.env_server
    return {
        "policy": pc.upstream_url or f"http://{_local(ps.host)}:{ps.port}",
        "proxy": es.proxy_url or f"http://{_local(pc.host)}:{pc.port}",
        "env": f"http://{_local(es.host)}:{es.port}",
    }


def server_steps(cfg, config_path: str, overrides: list[str]) -> list[Step]:
    """vLLM, then the capture proxy, then the env server, each a `fathom ... serve` child with its health URL."""
    fathom = [sys.executable, "-m", "fathom.entrypoints.cli"]
    common = ["-c", config_path, *overrides]
    ps, pc, es = cfg.policy_server, cfg.capture_proxy, cfg.env_server
    return [
        Step("server", "policy", [*fathom, "policy", "serve", *common], f"http://{_local(ps.host)}:{ps.port}/health"),
        Step("server", "proxy", [*fathom, "proxy", "serve", *common], f"http://{_local(pc.host)}:{pc.port}/healthz"),
        Step("server", "env", [*fathom, "env", "serve", *common], f"http://{_local(es.host)}:{es.port}/health"),
    ]


class PlanError(ValueError):
    """The config asks for a main job whose steps cannot all be given what they need."""


def sft_adapter_dir(cfg) -> Path:
    return cfg.run_dir / "sft" / "adapter"


def slow_cpu_note(cfg, cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The line a CPU run starts with where the CPU has no native bf16: `"auto"` then serves and trains in fp32,
    and the job takes about twice as long (`make demo` on 2 cores: 67.6-69.8 minutes on an AVX2-only EPYC against
    34-40 with AVX512-BF16 or AMX; docs/main_job.md, "Where the time goes"). None on a GPU or such a CPU."""
    from fathom.policy_server.launch import cpu_has_native_bf16, detect_device

    # the flags first: `detect_device("auto")` imports torch (2.2 s here), which a CPU with native bf16 never needs
    if cpu_has_native_bf16(cpuinfo) or detect_device(cfg.policy_server.device) != "cpu":
        return None
    return (f"this CPU has no native bf16 (no avx512_bf16 or amx_bf16 in {cpuinfo}): with the `auto` settings "
            "vLLM and the trainer run in fp32, and the job takes about twice as long as on a CPU with it "
            "(docs/main_job.md, \"Where the time goes\"; measured runs in docs/results.md)")


def check_split(cfg) -> None:
    """PlanError unless `eval.split` names a pinned split, so a typo stops the job before SFT and GRPO, not after."""
    from fathom import tasks as T
    from fathom.tasks.splits import ManifestError

    T.configure(cfg.tasks)
    try:
        T.load_split(cfg.eval.split, verify_sha=False)
    except ManifestError as e:
        raise PlanError(f"eval.split (--split): {e}") from None


def plan(cfg, config_path: str, overrides: list[str]) -> list[Step]:
    """Every step of the main job, in order."""
    if "eval" in cfg.launch.stages or cfg.launch.eval_watch:
        check_split(cfg)
    fathom = [sys.executable, "-m", "fathom.entrypoints.cli"]
    common = ["-c", config_path, *overrides]
    steps = server_steps(cfg, config_path, overrides)
    t = cfg.trainer
    start, start_label, anchor = t.init_adapter, "init", rows_path(t.sft_anchor_data, t.init_adapter)
    if "sft" in cfg.launch.stages and not start:
        try:
            check_phrasings(cfg.sft)
        except ValueError as e:
            raise PlanError(str(e)) from None
        steps.append(Step("stage", "sft", [*fathom, "sft", *common]))
        start, start_label = str(sft_adapter_dir(cfg)), "sft"
        anchor = anchor or str(sft_adapter_dir(cfg).parent / "data.jsonl")  # `fathom sft` writes it there
    if "grpo" in cfg.launch.stages:
        if cfg.launch.eval_watch:
            steps.append(Step("server", "eval-watch", [*fathom, "eval", "watch", *common]))
        init = ["--trainer.init_adapter", start] if start else []
        if t.sft_anchor_coef > 0:
            if not anchor:
                raise PlanError(str(missing_rows(t.sft_anchor_coef, start)))
            init += ["--trainer.sft_anchor_data", anchor]
        steps.append(Step("stage", "grpo", [*fathom, "train", *common, *init]))
    if "eval" in cfg.launch.stages:
        cores = cfg.launch.eval_policy_cores
        if cores and cores != cfg.policy_server.cpu_cores:
            # No trainer runs beside the evaluation, so its cores are free for vLLM (the overlap check between
            # the two settings is for runs where both share the machine).
            policy = server_steps(cfg, config_path, [*overrides, "--policy_server.cpu_cores", cores,
                                                     "--trainer.cpu_cores="])[0]
            if any(s.kind == "stage" for s in steps):
                steps.append(Step("restart", policy.name, policy.argv, policy.health_url))
            else:
                steps[0] = policy
        stages = ["--stage", "base"] if cfg.launch.eval_base else []
        if start:
            stages += ["--stage", f"{start_label}={start}"]
        if "grpo" in cfg.launch.stages:
            stages += ["--stage", f"grpo={cfg.run_dir / 'final'}"]
        if not stages:
            raise PlanError("the evaluation has no stage to score: launch.eval_base is off and there is no adapter; "
                            "turn launch.eval_base on, or add the sft or grpo stage, or set trainer.init_adapter")
        steps.append(Step("stage", "eval", [*fathom, "eval", "stages", *common, *stages]))
    return steps


def split_use(split: str) -> str:
    """What a score on `split` may be used for, under the selection protocol of docs/main_job.md."""
    return {"test": "for choosing a recipe", "heldout": "for reporting a chosen recipe; never choose on it",
            "train": "the tasks GRPO trains on: not an estimate of anything new"}.get(split, "an imported task set")


def sync_line(cfg) -> str:
    """How the trainer's weights reach vLLM under this config: the dry run's first line."""
    from fathom.config import merged_backend

    ps, t = cfg.policy_server, cfg.trainer
    where = (f"trainer on cuda:{t.cuda_device}, vLLM on cuda:{ps.cuda_device}" if ps.device != "cpu"
             else "trainer and vLLM on CPU")
    backend = merged_backend(cfg)
    if backend is None:
        how = f"adapter (a LoRA adapter per version through /v1/load_lora_adapter, {ps.max_loras} slots)"
    elif backend == "nccl":
        how = "merged over NCCL (TRL's weight transfer, vLLM --weight-transfer-config nccl)"
    else:
        how = (f"merged by disk reload (safetensors under {ps.merged_dir or cfg.run_dir / 'merged'}, "
               "vLLM reload_weights through /collective_rpc)")
    return f"weight sync: {how}; {where}"


@contextlib.contextmanager
def trainer_fence(cfg, stage: str, console=None):
    """While GRPO runs with `trainer.cpu_cores` set and `launch.fence_trainer_cores` on, the launcher and every
    server it started stay off the trainer's cores (`cores.py`); otherwise nothing changes."""
    if stage != "grpo" or not cfg.launch.fence_trainer_cores or not cfg.trainer.cpu_cores:
        yield
        return
    from fathom.config.cpus import parse_cpu_list
    from fathom.entrypoints.cores import CoreFence

    with CoreFence(parse_cpu_list(cfg.trainer.cpu_cores)) as fence:
        if console is not None:
            console.print(f"{len(fence.saved)} server threads kept off the trainer's cores "
                          f"({cfg.trainer.cpu_cores}) while GRPO trains")
        yield


def launch(
    ctx: typer.Context,
    config: str = typer.Argument(..., help="TOML config, e.g. configs/smoke.toml."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and exit."),
    split: str = typer.Option(None, "--split", help="Task split the evaluation scores, for every stage (sets "
                              "eval.split): `test` to choose a recipe, `heldout` to report one (docs/main_job.md)."),
) -> None:
    """Run the main job: policy server, proxy and env server, then SFT, GRPO and the evaluation of `eval.split`."""
    if split:  # an override like any other, so every stage the plan starts gets it too
        ctx.args = [*ctx.args, "--eval.split", split]
    cfg = config_from(ctx, config)
    try:
        steps = plan(cfg, config, list(ctx.args))
    except PlanError as e:
        die(str(e))
    from fathom.tasks import configure, store

    configure(cfg.tasks)
    if lost := store.missing(cfg.tasks.sources):  # stages would each fail later, after the servers start
        die(f"task source(s) {', '.join(lost)} are configured but not imported into {str(store.root())!r}; run "
            + " and ".join(f"`fathom tasks import {n} -c {config}`" for n in lost))
    if dry_run:
        from fathom.trainer.bucket import bucket_run_dir

        print(sync_line(cfg))
        if (bucket := bucket_run_dir(cfg.launch.bucket_dir, cfg.run_name)) is not None:
            print(f"run dir: {cfg.run_dir} (local disk), copied as complete files to {bucket}")
        for i, s in enumerate(steps, 1):
            extra = f"  (healthy at {s.health_url})" if s.health_url else ""
            print(f"{i}. {s.kind} {s.name}: {shlex.join(s.argv)}{extra}")
        return

    from rich.console import Console

    from fathom.config import write_resolved
    from fathom.config.model import EMBEDDED
    from fathom.entrypoints.recovery import hooks_for
    from fathom.entrypoints.supervisor import LaunchError, Restarts, Supervisor
    from fathom.policy_server.models import ModelError, prepare_embedded
    from fathom.trainer.bucket import bucket_run_dir, copy_run

    console = Console(stderr=True)
    if cfg.model.name == EMBEDDED:
        try:
            with console.status("preparing the embedded model (SmolLM2-135M-Instruct)"):
                prepare_embedded()
        except ModelError as e:
            die(str(e))
    write_resolved(cfg)
    if note := slow_cpu_note(cfg):
        console.print(f"[yellow]{note}[/]")
    if "eval" in cfg.launch.stages:
        console.print(f"the evaluation scores the {cfg.eval.split!r} split ({split_use(cfg.eval.split)})")
    t0 = time.monotonic()
    log_dir = cfg.run_dir / "logs"
    lc = cfg.launch
    restarts = Restarts(limit=lc.max_restarts, window_s=lc.restart_window_s, backoff_s=lc.restart_backoff_s,
                        backoff_max_s=lc.restart_backoff_max_s, start_timeout_s=lc.server_start_timeout_s)
    hooks = hooks_for(cfg, server_urls(cfg))
    bucket = bucket_run_dir(lc.bucket_dir, cfg.run_name)
    step_s: dict[str, float] = {}  # seconds each server took to become healthy and each stage took to finish
    try:
        with Supervisor(log_dir, restarts=restarts, on_event=lambda line: console.print(f"[yellow]{line}[/]")) as sup:
            for s in steps:
                t_step = time.monotonic()
                if s.kind == "server":
                    with console.status(f"starting {s.name} (log: {log_dir / (s.name + '.log')})") as status:
                        sup.serve(s.name, s.argv, s.health_url, lc.server_start_timeout_s,
                                  on_tick=status.update, on_restart=hooks.get(s.name))
                    console.print(f"[green]{s.name} {'healthy' if s.health_url else 'started'}[/] "
                                  f"({s.health_url or 'no health URL'})")
                elif s.kind == "restart":
                    with console.status(f"restarting {s.name} for the evaluation on cores "
                                        f"{lc.eval_policy_cores}") as status:
                        sup.replace(s.name, s.argv, s.health_url, lc.server_start_timeout_s,
                                    on_tick=status.update, on_restart=hooks.get(s.name))
                    console.print(f"[green]{s.name} restarted on cores {lc.eval_policy_cores}[/] ({s.health_url})")
                else:
                    console.rule(f"stage {s.name}")
                    stall = {"heartbeat": cfg.run_dir / "metrics.jsonl",
                             "stall_s": cfg.trainer.watchdog_s + lc.stall_grace_s} if s.name == "grpo" else {}
                    with trainer_fence(cfg, s.name, console):
                        sup.run_stage(s.name, s.argv, **stall)
                step_s[f"{s.name} restart" if s.kind == "restart" else s.name] = round(time.monotonic() - t_step, 1)
    except LaunchError as e:
        copy_run(cfg.run_dir, bucket)  # what the run got to (checkpoints, logs) outlives the machine
        die(f"the main job stopped: {e}", code=1)
    except KeyboardInterrupt:
        copy_run(cfg.run_dir, bucket)
        die("interrupted; every server and stage was stopped", code=130)
    plots: list = []
    if (cfg.run_dir / "metrics.jsonl").is_file():
        from fathom.trainer.plot import PlotError, plot_run

        try:
            plots = plot_run(cfg.run_dir)
        except PlotError as e:
            console.print(f"[yellow]no plots[/]: {e}")
    wall = time.monotonic() - t0
    (cfg.run_dir / "launch.json").write_text(json.dumps({"wall_s": round(wall, 1), "steps": [s.name for s in steps],
                                                             "step_s": step_s}) + "\n")
    if bucket is not None:
        with console.status(f"copying the run to {bucket}"):
            copy_run(cfg.run_dir, bucket)
    console.print(f"[bold green]done[/] in {wall / 60:.1f} min: everything is in {cfg.run_dir}"
                  + (f" (copied to {bucket})" if bucket is not None else ""))
    summary = cfg.run_dir / "eval" / "summary.json"
    if summary.is_file():
        console.print(f"pass@1 by stage and paired deltas: {summary}; reports: {cfg.run_dir / 'eval'}/<stage>/report.html; "
                      f"training plots: {plots[0].parent if plots else 'none'}")


__all__ = ["OVERRIDE_SETTINGS", "PlanError", "Step", "check_split", "launch", "plan", "server_steps", "server_urls",
           "split_use", "sync_line"]
