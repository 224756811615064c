"""`fathom export RUN_DIR`: adapter + model card + eval results, ready for `fathom serve` or the Hub."""

from __future__ import annotations

from pathlib import Path

import typer

from fathom.entrypoints.common import die


def export(
    run_dir: Path = typer.Argument(..., help="Run directory (runs/NAME), or a checkpoint/adapter directory."),
    out: Path = typer.Option(None, help="Output directory (default: RUN_DIR/export)."),
    step: int = typer.Option(None, help="Export checkpoint-STEP instead of the newest complete one."),
    push: str = typer.Option(None, help="Also upload the exported folder to this Hub model repo (token: HF_TOKEN)."),
    base_model: str = typer.Option(None, help="Hub id of the base the adapter was trained on, for a run on a local "
                                              "model directory (default: from the run's config)."),
) -> None:
    """Write adapter_model.safetensors, adapter_config.json, fathom.json, README.md (model card) and eval/ to one
    directory."""
    from fathom.eval.export import ExportError
    from fathom.eval.export import export as do_export

    try:
        dest = do_export(run_dir, out, step=step, base_model=base_model)
    except ExportError as e:
        die(str(e))
    print(dest)
    if push:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError

        try:
            api = HfApi()
            api.create_repo(push, repo_type="model", exist_ok=True)
            api.upload_folder(repo_id=push, folder_path=str(dest), commit_message="FATHOM adapter and eval results")
        except (HfHubHTTPError, OSError, ValueError) as e:
            die(f"--push {push}: upload failed ({e}); check HF_TOKEN and the repo id")
        print(f"pushed to https://huggingface.co/{push}")
    print(f"serve it: fathom serve {dest}  (the model card has the plain vLLM lines)")
