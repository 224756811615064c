"""`fathom config show|check`: print or validate the resolved config tree."""

from __future__ import annotations

import json

import typer

from fathom.entrypoints.common import CONFIG_OPTION, OVERRIDE_SETTINGS, config_from

app = typer.Typer(help="Inspect the typed config tree.", no_args_is_help=True)


@app.command("show", context_settings=OVERRIDE_SETTINGS)
def show(ctx: typer.Context, config: str = CONFIG_OPTION) -> None:
    """Print the resolved config (file + overrides + defaults) as JSON."""
    cfg = config_from(ctx, config)
    print(json.dumps(cfg.model_dump(mode="json"), indent=2))


@app.command("check", context_settings=OVERRIDE_SETTINGS)
def check(ctx: typer.Context, config: str = CONFIG_OPTION) -> None:
    """Validate the config and its cross-component checks."""
    config_from(ctx, config)
    print(f"{config}: ok")
