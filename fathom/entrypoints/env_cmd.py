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

    from fathom.config import ConfigError
    from fathom.config.security import check_bind
    from fathom.env_server.server.app import create_app

    bind = host or cfg.env_server.host
    try:
        check_bind(bind, cfg.token(), "the env server", "--host" if host else "env_server.host")
    except ConfigError as e:
        die(str(e))

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tokenizer_dir = None
    if cfg.env_server.prompt_format == "tokens" and not cfg.env_server.tokenizer:
        from fathom.policy_server.models import ModelError, resolve_model

        try:  # the served model's own tokenizer and chat template build the token-space prompts
            tokenizer_dir = resolve_model(cfg.server_model or cfg.model, local_only=True)
        except ModelError as e:
            die(f"env server needs the served model's tokenizer: {e} (or set env_server.tokenizer, "
                "or env_server.prompt_format = 'chat' for an API-only server)")
    try:
        application = create_app(cfg, tokenizer_dir=tokenizer_dir)
    except Exception as e:  # noqa: BLE001 - config the server cannot run with (e.g. a required sandbox layer missing)
        die(f"env server cannot start: {e}")
    uvicorn.run(
        application,
        host=bind,
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
    tokenizer: str = typer.Option(None, help="A model directory: also serve /tokenize and token-id prompts with its "
                                             "tokenizer and chat template (the env server's token path)."),
    delay: float = typer.Option(0.0, help="Seconds each completion waits before it is returned (a slow model)."),
    log_level: str = typer.Option("warning", help="uvicorn log level."),
) -> None:
    """Serve a fake vLLM that plays a scripted policy (no model; for tests, benchmarks and demos), with run-time
    policy switching, fault injection and vLLM's weight-sync routes (fathom/testing/fake_vllm.py)."""
    import uvicorn

    from fathom.testing.fake_vllm import create_fake_vllm

    try:
        application = create_fake_vllm(policy, model, tokenizer_dir=tokenizer, delay_s=delay)
    except ValueError as e:
        die(str(e))
    uvicorn.run(application, host=host, port=port, log_level=log_level)


@app.command("episode", context_settings=OVERRIDE_SETTINGS)
def episode(
    ctx: typer.Context,
    task: str = typer.Option(..., "--task", help="Task id, e.g. needle-32k-s1000000 (see `fathom tasks show`)."),
    config: str = CONFIG_OPTION,
    url: str = typer.Option(None, help="Env server base URL (default: http://{env_server.host}:{env_server.port})."),
    max_turns: int = typer.Option(None, help="Turn limit (default: env_server.max_turns)."),
    max_depth: int = typer.Option(None, help="Recursion depth (default: env_server.max_depth; demos use 4)."),
    timeout_s: float = typer.Option(3600.0, help="Give up waiting after this long."),
) -> None:
    """Run one episode on a running env server (and its capture proxy) and print the result as JSON."""
    cfg = config_from(ctx, config)
    from fathom.env_server.client import EpisodeClient, EpisodeError
    from fathom.protocol import EpisodeLimits, EpisodeRequest

    base = url or cfg.env_url
    req = EpisodeRequest(task_id=task, limits=EpisodeLimits(max_turns=max_turns, max_depth=max_depth))
    try:
        with EpisodeClient(base) as client:
            res = client.run(req, timeout_s=timeout_s)
    except EpisodeError as e:
        die(str(e))
    except Exception as e:  # noqa: BLE001 - connection refused and the like: say where
        die(f"env server at {base} unreachable ({e}); start it with `fathom env serve`")
    print(res.model_dump_json(indent=2))
    if res.status != "done":
        raise typer.Exit(1)
