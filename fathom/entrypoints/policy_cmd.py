"""`fathom policy serve`: run vLLM supervised until Ctrl-C or SIGTERM."""

from __future__ import annotations

import signal
import sys
import time

import typer

from fathom.entrypoints.common import CONFIG_OPTION, OVERRIDE_SETTINGS, config_from, die

app = typer.Typer(help="Run the vLLM policy server.", no_args_is_help=True)


def start_policy_server(cfg, enforce_eager: bool | None = None, quiet: bool = False):
    """Resolve the model, start vLLM, wait for health with a progress line. Returns the running server."""
    from rich.console import Console

    from fathom.config import write_resolved
    from fathom.policy_server.launch import PolicyServer, PolicyServerError
    from fathom.policy_server.models import ModelError, resolve_model

    if enforce_eager is not None:
        cfg.policy_server.enforce_eager = enforce_eager
    served = cfg.server_model or cfg.model  # the cross-checks guarantee they agree
    try:
        path = resolve_model(served)
    except ModelError as e:
        die(str(e))
    write_resolved(cfg)
    server = PolicyServer(cfg.policy_server, served, path, cfg.run_dir / "logs")
    console = Console(stderr=True, quiet=quiet)
    try:
        server.start()
        with console.status(f"starting vLLM on {server.base_url} (log: {server.log_path})") as status:
            waited = server.wait_healthy(on_tick=lambda s: status.update(f"starting vLLM on {server.base_url}: {s:.0f} s"))
    except PolicyServerError as e:
        server.stop()
        die(str(e))
    except BaseException:
        server.stop()
        raise
    console.print(f"vLLM healthy on {server.base_url} after {waited:.1f} s; serving {path} as {cfg.policy_server.served_model_name!r}")
    return server


@app.command("serve", context_settings=OVERRIDE_SETTINGS)
def serve(
    ctx: typer.Context,
    config: str = CONFIG_OPTION,
    enforce_eager: bool = typer.Option(None, "--enforce-eager/--compile", help="Skip graph compilation (fast start, for tests)."),
) -> None:
    """Start vLLM with what the pipeline needs and keep it running; stops its process group on exit."""
    cfg = config_from(ctx, config)

    def _exit(signum, _frame):
        sys.exit(128 + signum)

    # Installed before vLLM starts: vLLM runs in its own session, so a SIGTERM that killed this process while
    # vLLM was still starting (a launcher stopping it) would leave vLLM running. SystemExit reaches the
    # `except BaseException` of start_policy_server, or the `finally` below, and both stop vLLM's group.
    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGINT, _exit)
    server = start_policy_server(cfg, enforce_eager)
    try:
        while server.alive():
            time.sleep(1.0)
    finally:
        code = server.proc.poll() if server.proc else None
        server.stop()
    if code not in (None, 0):
        die(f"vLLM exited with code {code}; last lines:\n{server.log_tail()}")
