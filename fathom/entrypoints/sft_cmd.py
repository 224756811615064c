"""`fathom sft`: record scripted-teacher episodes through the real harness and proxy, then LoRA SFT on them.

The teacher (the scripted `teach` policy on the model's own tokenizer, `fathom.env_server.scripted`)
and a capture proxy in front of it run in this process on free loopback ports (`fathom.stack.teacher`); the
episodes run on the env server named by the config (the one `fathom launch` started), so they use the same
sandbox, harness and token path as GRPO.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from fathom.entrypoints.common import CONFIG_OPTION, OVERRIDE_SETTINGS, config_from, die, progress_line


def sft(
    ctx: typer.Context,
    config: str = CONFIG_OPTION,
    out: str = typer.Option("", help="Output directory; default <run_dir>/sft."),
    workers: int = typer.Option(8, help="Episodes recorded at once."),
) -> None:
    """Record teacher episodes on the running env server, then train the LoRA warm start (`<out>/adapter`)."""
    # No passive_omp() here, unlike `fathom train`: SFT trains after the recording, while vLLM sits idle, so
    # nothing needs the cores its OpenMP threads spin on. Passive threads made it slower: 24 demo rows in 136
    # against 110 s with the default wait policy, an idle vLLM up (docs/trainer.md).
    cfg = config_from(ctx, config)
    from fathom.tasks.sft_tasks import sft_task_ids

    try:
        task_ids = sft_task_ids(cfg.sft)
    except ValueError as e:
        die(str(e))
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from fathom.policy_server.models import ModelError, resolve_model
    from fathom.stack.teacher import record_teacher
    from fathom.trainer.sft import train_sft

    console = Console(stderr=True)
    out_dir = Path(out) if out else cfg.run_dir / "sft"
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        model_dir = resolve_model(cfg.model)
    except ModelError as e:
        die(str(e))
    rows: list[dict] = []
    summaries: list[dict] = []
    cols = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.fields[info]}"), TimeRemainingColumn())
    if cfg.sft.demonstrations:  # checked before any episode is recorded: a bad line fails in seconds
        from fathom.env_server.server.demos import DemoError, rows_from_demonstrations
        from fathom.env_server.server.tokens import ChatTokens, TemplateError

        try:
            demos = rows_from_demonstrations(cfg.sft.demonstrations, ChatTokens.load(model_dir), cfg.sft.max_length)
        except (DemoError, TemplateError) as e:
            die(str(e))
        console.print(f"{len(demos)} demonstrations from {cfg.sft.demonstrations}")
    else:
        demos = []
    if cfg.sft.teacher:
        with Progress(*cols, console=console) as bar:
            job = bar.add_task("recording teacher episodes", total=len(task_ids), info="")

            def on_done(done: list[dict]) -> None:
                kept = sum(1 for s in done if s.get("rows"))
                bar.update(job, advance=1, info=f"kept {kept}")
                progress_line(console, "recorded teacher episodes", len(done), len(task_ids), f"kept {kept}")

            rows, summaries = record_teacher(cfg, task_ids, model_dir, workers, on_done)
        (out_dir / "episodes.jsonl").write_text("".join(json.dumps(s) + "\n" for s in summaries))
        kept = sum(1 for s in summaries if s.get("rows"))
        console.print(f"recorded {len(summaries)} teacher episodes; {kept} solved without a cut turn -> {len(rows)} rows")
    rows += demos
    (out_dir / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if not rows:
        die(f"no usable teacher episode or demonstration; see {out_dir / 'episodes.jsonl'}", code=1)
    with Progress(*cols, console=console) as bar:
        job = bar.add_task("SFT", total=None, info="")
        def on_step(step: int, total: int, loss: float) -> None:
            bar.update(job, completed=step, total=total, info=f"loss {loss:.3f}")
            progress_line(console, "SFT step", step, total, f"loss {loss:.3f}")

        metrics = train_sft(model_dir, rows, out_dir, sft=cfg.sft, lora=cfg.trainer.lora, on_step=on_step)
    frac = metrics.get("flop_fraction_of_peak")
    line = (f"SFT: {metrics.get('tokens_per_s')} tok/s fwd+bwd, "
            + (f"{frac:.1%} of this machine's measured {metrics['matmul_dtype']} matmul peak" if frac is not None
               else "no FLOP fraction (no wall time)"))
    if (fwd := metrics.get("forwarded_token_frac")) is not None:
        line += f"; forwarded {fwd:.0%} of the rows' tokens" + (", shared prefixes once" if metrics["share_prefix"] else "")
    console.print(line)
    console.print(f"SFT done: {json.dumps(metrics)}; adapter in {out_dir / 'adapter'}")


__all__ = ["OVERRIDE_SETTINGS", "sft"]
