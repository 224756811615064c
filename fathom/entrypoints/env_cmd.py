"""`fathom env serve|scripted`: the OpenEnv env server, and the scripted reference-policy upstream."""

from __future__ import annotations

import logging

import typer

from fathom.entrypoints.common import CONFIG_OPTION, OVERRIDE_SETTINGS, config_from, die

app = typer.Typer(help="Run the OpenEnv env server.", no_args_is_help=True)


@app.command("serve", context_settings=OVERRIDE_SETTINGS)
def serve(
    ctx: typer.Context,
    config: str = CONFIG_OPTION,
    host: str = typer.Option(None, help="Bind address (default: env_server.host)."),
    port: int = typer.Option(None, help="Port (default: env_server.port, 8200)."),
    log_level: str = typer.Option("info", help="uvicorn/fathom log level."),
) -> None:
    """Serve the RLM environment (OpenEnv reset/step/state/ws) and the episode runner (/episodes)."""
    cfg = config_from(ctx, config)
    import uvicorn

    from fathom.env_server.server.app import create_app

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        application = create_app(cfg)
    except Exception as e:  # config the server cannot run with (e.g. a required sandbox layer missing)
        die(f"env server cannot start: {e}")
    uvicorn.run(
        application,
        host=host or cfg.env_server.host,
        port=port or cfg.env_server.port,
        log_level=log_level,
        ws_max_size=64 * 2**20,
    )


@app.command("scripted")
def scripted(
    policy: str = typer.Option("reference", help="reference | no_tools | recursive | no_code | crash"),
    host: str = typer.Option("127.0.0.1", help="Bind address."),
    port: int = typer.Option(8300, help="Port; point capture_proxy.upstream_url at it."),
    model: str = typer.Option("fathom-base", help="Model name served at /v1/models."),
    log_level: str = typer.Option("warning", help="uvicorn log level."),
) -> None:
    """Serve a scripted policy as an OpenAI-compatible upstream (no model; for tests, benchmarks and demos)."""
    import uvicorn

    from fathom.env_server.scripted import create_scripted_app

    try:
        application = create_scripted_app(policy, model)
    except ValueError as e:
        die(str(e))
    uvicorn.run(application, host=host, port=port, log_level=log_level)
