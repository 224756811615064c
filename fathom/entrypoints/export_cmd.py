"""`fathom export RUN_DIR`: adapter + model card + eval results, ready for `vllm serve --lora-modules` or the Hub."""

from __future__ import annotations

from pathlib import Path

import typer

from fathom.entrypoints.common import die


def export(
    run_dir: Path = typer.Argument(..., help="Run directory (runs/NAME), or a checkpoint/adapter directory."),
    out: Path = typer.Option(None, help="Output directory (default: RUN_DIR/export)."),
    step: int = typer.Option(None, help="Export checkpoint-STEP instead of the newest complete one."),
) -> None:
    """Write adapter_model.safetensors, adapter_config.json, README.md (model card) and eval/ to one directory."""
    from fathom.eval.export import ExportError
    from fathom.eval.export import export as do_export

    try:
        dest = do_export(run_dir, out, step=step)
    except ExportError as e:
        die(str(e))
    print(dest)
    print(f"serve it: vllm serve BASE --enable-lora --lora-modules fathom={dest.resolve()}")
