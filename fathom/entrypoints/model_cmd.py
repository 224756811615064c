"""`fathom model ...`."""

from __future__ import annotations

import typer

app = typer.Typer(help="Prepare the embedded model and build the tiny test model.", no_args_is_help=True)
