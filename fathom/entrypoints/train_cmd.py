"""`fathom train` and `fathom plot`: async GRPO against running servers, and charts of a run.

Safe to re-import: TRL's rollout worker is a spawned child that re-imports `__main__`, so nothing here runs
at import time, and heavy modules load inside the commands.
"""

from __future__ import annotations

import os
import signal

import typer

from fathom.config.base import cuda_visible
from fathom.entrypoints.common import CONFIG_OPTION, OVERRIDE_SETTINGS, config_from, die
from fathom.stack.threads import PinError, passive_omp, pin_cpus

EXIT_WATCHDOG = 3


def train(
    ctx: typer.Context,
    config: str = CONFIG_OPTION,
    resume: bool = typer.Option(False, "--resume", help="Continue from the run directory's newest checkpoint."),
    vllm_url: str = typer.Option(None, help="Policy server root (default: policy_server.host:port)."),
    proxy_url: str = typer.Option(None, help="Capture proxy root (default: capture_proxy.host:port)."),
    env_url: list[str] = typer.Option(None, help="Env server root; repeat to spread episodes over several "
                                                 "(default: env_server.urls, else env_server.host:port)."),
    progress: bool = typer.Option(True, help="Show a rich progress bar."),
    keep_merged: bool = typer.Option(False, "--keep-merged", help="Leave the tmpfs folder of merged weights "
                                     "(policy_server.merged_dir = 'auto') when training stops: `fathom launch` "
                                     "passes it, since its eval-stage vLLM restart reloads them, and removes the "
                                     "folder itself when it stops."),
) -> None:
    """Train the LoRA policy with TRL's AsyncGRPOTrainer on episodes the env server runs (servers must be up)."""
    passive_omp()
    cfg = config_from(ctx, config)
    if keep_merged:
        _train(cfg, resume, vllm_url, proxy_url, env_url, progress)
        return
    from fathom.trainer.merged_dir import remove_tmpfs
    from fathom.unwind import sigterm_unwinds

    old_term = sigterm_unwinds()  # so a SIGTERM, like Ctrl-C, reaches the `finally` that frees the tmpfs memory
    try:
        _train(cfg, resume, vllm_url, proxy_url, env_url, progress)
    finally:
        remove_tmpfs(cfg.policy_server.merged_dir, cfg.run_dir, cfg.run_name)
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)


def _train(cfg, resume: bool, vllm_url: str | None, proxy_url: str | None, env_url: list[str] | None,
           progress: bool) -> None:
    if cfg.policy_server.device != "cpu":  # before torch initialises CUDA in this process
        os.environ["CUDA_VISIBLE_DEVICES"] = cuda_visible(cfg.trainer.cuda_device)
    before = os.sched_getaffinity(0)
    try:
        pinned = pin_cpus(cfg.trainer.cpu_cores)
    except PinError as e:
        die(str(e))
    # TRL's rollout child goes to the cores the trainer left (empty when it has them all: it stays)
    rollout_cores = (sorted(before - set(pinned)) or None) if pinned else None
    import logging

    from fathom.config import write_resolved
    from fathom.policy_server.models import ModelError, resolve_model
    from fathom.rollout_worker.dataset import training_task_ids
    from fathom.trainer.anchor import AnchorDataError
    from fathom.trainer.attention import AttentionError
    from fathom.trainer.build import Endpoints, TrainerDeviceError, build_trainer, latest_checkpoint
    from fathom.trainer.callbacks import WATCHDOG_EXIT
    from fathom.trainer.cpu_compat import TrlVersionError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    es = cfg.env_server
    eps = Endpoints(vllm_url=vllm_url or cfg.policy_server.url, proxy_url=proxy_url or cfg.capture_proxy.url,
                    env_url=list(env_url or es.urls or [es.url]))
    try:
        model_path = resolve_model(cfg.model)
    except ModelError as e:
        die(str(e))
    checkpoint = None
    if resume:
        checkpoint = latest_checkpoint(cfg.run_dir)
        if checkpoint is None:
            die(f"--resume: run directory {str(cfg.run_dir)!r} has no checkpoint-N; start without --resume")
        typer.echo(f"resuming from {checkpoint}")
    write_resolved(cfg)
    from fathom.tasks import configure
    from fathom.tasks.splits import ManifestError

    configure(cfg.tasks)
    imported = [(s.name, s.weight) for s in cfg.tasks.sources if "train" in s.roles]
    try:  # an unimported source or an empty mix fails here, before any model loads
        task_ids = training_task_ids(cfg.trainer.train_split_size, cfg.trainer.train_max_length,
                                     cfg.trainer.train_families, imported=imported,
                                     generated_weight=cfg.tasks.generated_weight,
                                     order_seed=cfg.trainer.task_order_seed)
    except (ManifestError, ValueError) as e:
        die(str(e))
    try:
        run = build_trainer(cfg, model_path=model_path, endpoints=eps, progress=progress, task_ids=task_ids,
                            rollout_cores=rollout_cores)
    except (TrlVersionError, AnchorDataError, TrainerDeviceError, AttentionError) as e:
        die(str(e))
    try:
        run.trainer.train(resume_from_checkpoint=checkpoint)
    except KeyboardInterrupt:
        if run.watchdog.tripped:
            die(run.watchdog.tripped, WATCHDOG_EXIT)
        raise
    finally:
        run.watchdog.stop()
    run.trainer.save_model(str(run.run_dir / "final"))
    typer.echo(f"done: {run.trainer.state.global_step} steps; metrics in {run.run_dir / 'metrics.jsonl'}")


def plot(run_dir: str = typer.Argument(..., help="A run directory holding metrics.jsonl.")) -> None:
    """Write PNG charts of reward and its components, loss, KL, entropy, mismatch, lengths, sub-calls, sync time,
    and the learning dynamics: training success by family, group reward spread and flat groups, sampled-token NLL,
    importance-sampling ratios, drift from the starting adapter, staleness and task length."""
    from fathom.trainer.plot import PlotError, plot_run

    try:
        paths = plot_run(run_dir)
    except PlotError as e:
        die(str(e))
    for p in paths:
        typer.echo(str(p))


def register(app: typer.Typer) -> None:
    app.command("train", context_settings=OVERRIDE_SETTINGS)(train)
    app.command("plot")(plot)
