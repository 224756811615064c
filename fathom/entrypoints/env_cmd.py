"""`fathom env ...`."""

from __future__ import annotations

import typer

app = typer.Typer(help="Run the OpenEnv env server.", no_args_is_help=True)
