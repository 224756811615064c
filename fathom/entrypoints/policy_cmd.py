"""`fathom policy ...`."""

from __future__ import annotations

import typer

app = typer.Typer(help="Run the vLLM policy server.", no_args_is_help=True)
