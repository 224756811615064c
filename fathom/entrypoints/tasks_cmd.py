"""`fathom tasks ...`."""

from __future__ import annotations

import typer

app = typer.Typer(help="Build, inspect and count long-context tasks.", no_args_is_help=True)
