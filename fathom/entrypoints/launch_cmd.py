"""`fathom launch CONFIG`: the main job. Servers up, then SFT, GRPO and an evaluation, then all down.

The evaluation scores `eval.split` (`--split NAME` sets it for every stage): `test` when choosing a recipe,
`heldout` only to report a chosen one (docs/main_job.md, "How the recipe is chosen").

The plan is a list of steps computed from the config alone (`fathom.stack.plan`; `--dry-run` prints it), so
what runs is what the plan says. Servers and stages are `fathom` subcommands run as supervised children
(`fathom.stack.supervisor`); the stages reach the servers at the URLs the config gives them. A server that dies
is restarted with backoff and gets back what it forgot (`fathom.stack.recovery`); see docs/reliability.md.
"""

from __future__ import annotations

import json
import shlex
import time

import typer

from fathom.entrypoints.common import config_from, die
from fathom.stack.plan import PlanError, plan, slow_cpu_note, split_use, sync_line


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
        _print_plan(cfg, steps)
        return

    from rich.console import Console

    from fathom.config import write_resolved
    from fathom.config.model import EMBEDDED
    from fathom.policy_server.models import ModelError, prepare_embedded
    from fathom.stack.run import run_steps
    from fathom.stack.supervisor import LaunchError
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
    bucket = bucket_run_dir(cfg.launch.bucket_dir, cfg.run_name)
    try:
        step_s = run_steps(cfg, steps, console)
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
    record = {"wall_s": round(wall, 1), "steps": [s.name for s in steps], "step_s": step_s}
    summary = cfg.run_dir / "eval" / "summary.json"
    if "eval" in record["steps"] and summary.is_file() and "base_cache" in (evaluated := json.loads(summary.read_text())):
        record["base_cache"] = evaluated["base_cache"]  # which stored base results the evaluation used or made
    (cfg.run_dir / "launch.json").write_text(json.dumps(record) + "\n")
    if bucket is not None:
        with console.status(f"copying the run to {bucket}"):
            copy_run(cfg.run_dir, bucket)
    console.print(f"[bold green]done[/] in {wall / 60:.1f} min: everything is in {cfg.run_dir}"
                  + (f" (copied to {bucket})" if bucket is not None else ""))
    if summary.is_file():
        console.print(f"pass@1 by stage and paired deltas: {summary}; reports: {cfg.run_dir / 'eval'}/<stage>/report.html; "
                      f"training plots: {plots[0].parent if plots else 'none'}")


def _print_plan(cfg, steps) -> None:
    from fathom.trainer.bucket import bucket_run_dir

    print(sync_line(cfg))
    if (bucket := bucket_run_dir(cfg.launch.bucket_dir, cfg.run_name)) is not None:
        print(f"run dir: {cfg.run_dir} (local disk), copied as complete files to {bucket}")
    for i, s in enumerate(steps, 1):
        extra = f"  (healthy at {s.health_url})" if s.health_url else ""
        print(f"{i}. {s.kind} {s.name}: {shlex.join(s.argv)}{extra}")
