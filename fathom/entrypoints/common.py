"""Helpers shared by entry points: config loading with overrides, error exits."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer

from fathom.config import ConfigError, FathomConfig, load_config

CONFIG_OPTION = typer.Option("configs/smoke.toml", "--config", "-c", help="TOML config file under configs/.")

# Commands that take config accept `--section.key value` overrides after their own options.
OVERRIDE_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True}


def die(msg: str, code: int = 2) -> NoReturn:
    typer.secho(f"error: {msg}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def config_from(ctx: typer.Context, config: str) -> FathomConfig:
    """Load `config` with the extra CLI args as dotted overrides; exit with the message on error."""
    try:
        return load_config(config, list(ctx.args))
    except ConfigError as e:
        die(str(e))


def eprint(*args: object) -> None:
    print(*args, file=sys.stderr)
