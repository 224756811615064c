"""`fathom eval watch`: hot-load each new checkpoint into the running vLLM and score it on a fixed subset."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import typer

from fathom.entrypoints.common import CONFIG_OPTION, START_OPTION, config_from, die, eprint


def watch(
    ctx: typer.Context,
    checkpoints: str = typer.Option(..., help="Run dir, checkpoints dir (a mounted bucket works) or hf://owner/repo."),
    config: str = CONFIG_OPTION,
    out: Path = typer.Option(None, help="Output directory (default: {run_dir}/eval)."),
    n: int = typer.Option(None, "--n", help="Fixed subset: the first N tasks, plus later families in proportion (default: eval.watch_tasks, 100)."),
    split: str = typer.Option(None, help="Built-in or imported split (default: eval.split)."),
    stop_at_step: int = typer.Option(None, help="Exit once a checkpoint at or past this step is scored."),
    idle_exit_s: float = typer.Option(None, help="Exit after this long with no new checkpoint (default: never)."),
    start: bool = START_OPTION,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan as JSON and exit; contacts nothing."),
) -> None:
    """Score each new complete checkpoint-N once: eval/checkpoint-N.json, eval/summary.json, learning_curve.png."""
    cfg = config_from(ctx, config)
    if split:
        cfg.eval.split = split
    from fathom.eval.checkpoints import source_for
    from fathom.eval.run import EvalInputError, task_ids

    out = out or cfg.run_dir / "eval"
    try:
        ids = task_ids(cfg, None, n or cfg.eval.watch_tasks)
    except EvalInputError as e:
        die(str(e))
    source = source_for(checkpoints, out / "hub-cache")
    plan = {"source": source.describe(), "out": str(out), "split": cfg.eval.split, "tasks": len(ids),
            "poll_s": cfg.eval.watch_poll_s, "adapter_prefix": cfg.eval.adapter_name_prefix, "start_stack": start,
            "urls": {"policy": cfg.policy_url, "proxy": cfg.proxy_url, "env": cfg.env_url}, "stop_at_step": stop_at_step,
            "idle_exit_s": idle_exit_s}
    if dry_run:
        print(json.dumps(plan, indent=1))
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from fathom.eval.run import watch as watch_checkpoints
    from fathom.eval.runner import EvalError
    from fathom.policy_server.client import PolicyClientError
    from fathom.stack.stack import started

    eprint(f"watching {source.describe()}: {len(ids)} tasks of {cfg.eval.split} per checkpoint, results in {out}")
    with started(cfg, config, list(ctx.args), start):
        try:
            summary = watch_checkpoints(cfg, source, ids, out, stop_at_step=stop_at_step, idle_exit_s=idle_exit_s)
        except (EvalError, PolicyClientError) as e:
            die(str(e))
    print(json.dumps({"checkpoints": [r["step"] for r in summary["checkpoints"]], "best": summary["best"]}))
