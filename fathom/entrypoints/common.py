"""CLI helpers shared by the commands: the config option, config loading with overrides, error exits, progress."""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

import typer

from fathom.config import ConfigError, FathomConfig, load_config
from fathom.config.security import SHARED_TOKEN_ENV

CONFIG_OPTION = typer.Option("configs/smoke.toml", "--config", "-c", help="TOML config file under configs/.")

START_OPTION = typer.Option(False, "--start", help="Start vLLM, the capture proxy and the env server from the config.")

# Commands that take config accept `--section.key value` overrides after their own options.
OVERRIDE_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True}


def die(msg: str, code: int = 2) -> NoReturn:
    typer.secho(f"error: {msg}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def config_from(ctx: typer.Context, config: str) -> FathomConfig:
    """Load `config` with the extra CLI args as dotted overrides; exit with the message on error."""
    try:
        cfg = load_config(config, list(ctx.args))
    except ConfigError as e:
        die(str(e))
    token = cfg.token()
    if token:  # every fathom client, in this process and its children, reads the token from here
        os.environ[SHARED_TOKEN_ENV] = token
    return cfg


def progress_line(console: Any, what: str, done: int, total: int, info: str = "") -> None:
    """A plain `what done/total info` line about every 5% of `total`, only where `console` is no terminal.

    Without a terminal (`make demo > log`, HF Jobs logs) rich draws its bar once, when it stops, so a
    stage of many minutes would show nothing until it ended."""
    if console.is_terminal or total <= 0:
        return
    if done % max(1, total // 20) == 0 or done == total:
        console.print(f"{what} {done}/{total} {info}".rstrip(), highlight=False, soft_wrap=True)


def eprint(*args: object) -> None:
    print(*args, file=sys.stderr)
