"""`fathom launch CONFIG`: the main job. Servers up, then SFT, GRPO and a held-out evaluation, then all down.

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
    and the job takes about twice as long (measured: `make demo` 67.6 minutes on a 2-core AVX2-only EPYC against
    34-40 on 2-core machines with AVX512-BF16 or AMX; demo-28 in docs/main_job.md). None on a GPU or such a CPU."""
    from fathom.policy_server.launch import cpu_has_native_bf16, detect_device

    # the flags first: `detect_device("auto")` imports torch (2.2 s here), which a CPU with native bf16 never needs
    if cpu_has_native_bf16(cpuinfo) or detect_device(cfg.policy_server.device) != "cpu":
        return None
    return (f"this CPU has no native bf16 (no avx512_bf16 or amx_bf16 in {cpuinfo}): with the `auto` settings "
            "vLLM and the trainer run in fp32, and the job takes about twice as long as on a CPU with it "
            "(make demo on 2 cores: 67.6 minutes against 34-40; docs/main_job.md, demo-28)")


def plan(cfg, config_path: str, overrides: list[str]) -> list[Step]:
    """Every step of the main job, in order."""
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
        stages = ["--stage", "base"]
        if start:
            stages += ["--stage", f"{start_label}={start}"]
        if "grpo" in cfg.launch.stages:
            stages += ["--stage", f"grpo={cfg.run_dir / 'final'}"]
        steps.append(Step("stage", "eval", [*fathom, "eval", "stages", *common, *stages]))
    return steps


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
) -> None:
    """Run the main job: policy server, proxy and env server, then SFT, GRPO and held-out evaluation."""
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
    t0 = time.monotonic()
    log_dir = cfg.run_dir / "logs"
    lc = cfg.launch
    restarts = Restarts(limit=lc.max_restarts, window_s=lc.restart_window_s, backoff_s=lc.restart_backoff_s,
                        backoff_max_s=lc.restart_backoff_max_s, start_timeout_s=lc.server_start_timeout_s)
    hooks = hooks_for(cfg, server_urls(cfg))
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
        die(f"the main job stopped: {e}", code=1)
    except KeyboardInterrupt:
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
    console.print(f"[bold green]done[/] in {wall / 60:.1f} min: everything is in {cfg.run_dir}")
    summary = cfg.run_dir / "eval" / "summary.json"
    if summary.is_file():
        console.print(f"pass@1 by stage and paired deltas: {summary}; reports: {cfg.run_dir / 'eval'}/<stage>/report.html; "
                      f"training plots: {plots[0].parent if plots else 'none'}")


__all__ = ["OVERRIDE_SETTINGS", "PlanError", "Step", "launch", "plan", "server_steps", "server_urls"]
