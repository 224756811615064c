"""`fathom doctor`: report what this machine offers each component; `--gpu` checks a GPU job's prerequisites."""

from __future__ import annotations

import typer

from fathom.entrypoints.common import OVERRIDE_SETTINGS, config_from

__all__ = ["OVERRIDE_SETTINGS", "doctor"]


def doctor(
    ctx: typer.Context,
    gpu: bool = typer.Option(False, "--gpu", help="Check a GPU job's prerequisites for CONFIG: driver, CUDA build, "
                             "both venvs' torch, vLLM, the weight sync's needs, sandbox layers, disk. Exits 1 on a "
                             "failed check."),
    config: str = typer.Option("configs/qwen1.5b-a100.toml", "--config", "-c", help="Config of the job (--gpu)."),
) -> None:
    """Report venvs, the vLLM build, prepared models and sandbox isolation layers (or, with --gpu, a GPU job's)."""
    from fathom.doctor.checks import run_checks

    if not gpu:
        print_rows(run_checks(), "fathom doctor")
        return
    import time

    from fathom.doctor.gpu import run_gpu_checks
    from fathom.policy_server.launch import vllm_interpreter

    cfg = config_from(ctx, config)
    t0 = time.monotonic()
    rows = run_gpu_checks(cfg, vllm_python=vllm_interpreter(cfg.policy_server, "cuda"))
    print_rows(rows, f"fathom doctor --gpu ({config}, {time.monotonic() - t0:.0f} s)")
    failed = [name for name, ok, _ in rows if not ok]
    if failed:
        typer.echo(f"not ready for a GPU job: {', '.join(failed)}", err=True)
        raise typer.Exit(1)


def print_rows(rows: list[tuple[str, bool, str]], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table("check", "ok", "detail", title=title)
    for name, ok, detail in rows:
        table.add_row(name, "[green]yes[/]" if ok else "[red]no[/]", detail)
    Console(width=160).print(table)
