"""`fathom proxy ...`."""

from __future__ import annotations

import typer

app = typer.Typer(help="Run the capture proxy.", no_args_is_help=True)
