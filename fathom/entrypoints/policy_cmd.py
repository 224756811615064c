"""`fathom policy serve`: run vLLM supervised until Ctrl-C or SIGTERM. `fathom serve ADAPTER_OR_RUN`: the same
server with a trained adapter, for people rather than the pipeline."""

from __future__ import annotations

import json
import signal
import sys
import time

import typer

from fathom.entrypoints.common import CONFIG_OPTION, OVERRIDE_SETTINGS, config_from, die

app = typer.Typer(help="Run the vLLM policy server.", no_args_is_help=True)


@app.command("serve", context_settings=OVERRIDE_SETTINGS)
def serve(
    ctx: typer.Context,
    config: str = CONFIG_OPTION,
    enforce_eager: bool = typer.Option(None, "--enforce-eager/--compile", help="Skip graph compilation (fast start, for tests)."),
) -> None:
    """Start vLLM with what the pipeline needs and keep it running; stops its process group on exit."""
    _serve_until_stopped(config_from(ctx, config), enforce_eager)


def _serve_until_stopped(cfg, enforce_eager: bool | None = None, on_ready=None) -> None:
    def _exit(signum, _frame):
        sys.exit(128 + signum)

    # Installed before vLLM starts: vLLM runs in its own session, so a SIGTERM that killed this process while
    # vLLM was still starting (a launcher stopping it) would leave vLLM running. SystemExit reaches the
    # `except BaseException` of `start_policy_server`, or the `finally` below, and both stop vLLM's group.
    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGINT, _exit)
    from fathom.policy_server.launch import PolicyServerError
    from fathom.policy_server.models import ModelError
    from fathom.policy_server.start import start_policy_server

    try:
        server = start_policy_server(cfg, enforce_eager)
    except (ModelError, PolicyServerError) as e:
        die(str(e))
    try:
        if on_ready:
            on_ready(server)
        while server.alive():
            time.sleep(1.0)
    finally:
        code = server.proc.poll() if server.proc else None
        server.stop()
    if code not in (None, 0):
        die(f"vLLM exited with code {code}; last lines:\n{server.log_tail()}")


def serve_adapter(
    ctx: typer.Context,
    adapter: str = typer.Argument(..., metavar="ADAPTER_OR_RUN",
                                  help="An exported adapter (runs/NAME/export), an adapter or checkpoint directory, or "
                                       "a run directory (its export/, else its newest complete checkpoint)."),
    name: str = typer.Option("fathom", help="The model name requests use for the adapter."),
    config: str = typer.Option(None, "--config", "-c", help="TOML config for the server's other settings (default: "
                                                             "the built-in ones: device auto, 4 GB KV cache on CPU)."),
) -> None:
    """Serve a trained adapter on vLLM, on CPU or GPU, with a bounded KV cache; prints the model name and URL.

    The base is the one the adapter was trained on, found in the export's fathom.json or the run's config.
    Settings follow as `--section.key value` (e.g. --policy_server.port 8001 --policy_server.cpu_kvcache_gb 2)."""
    cfg, src, model = adapter_serve_config(adapter, name, config, list(ctx.args))

    def ready(server) -> None:
        root = server.base_url
        typer.echo(f"serving the adapter {src} on {model['name']}\n"
                   f"  model to request: {name}\n"
                   f"  base URL:         {root}/v1  (OpenAI-compatible)\n"
                   f"  try:              fathom ui --base-url {root} --model {name}\n"
                   "Ctrl-C stops it.")

    _serve_until_stopped(cfg, on_ready=ready)


def adapter_serve_config(adapter: str, name: str, config: str | None, args: list[str]):
    """(config, adapter directory, base model settings) for `fathom serve`; exits with the message on bad input."""
    from fathom.config import ConfigError, load_config
    from fathom.eval.export import ExportError, served_adapter

    try:
        src, model, rank = served_adapter(adapter)
    except ExportError as e:
        die(str(e))
    served = [f"model.{k}={json.dumps(v)}" for k, v in model.items() if v is not None]
    # The base is served under FATHOM's name for it (`embedded`, a Hub id, a directory), which `fathom ask` and
    # `fathom ui` resolve to its tokenizer for the token path. Adapter sync keeps dev mode (/collective_rpc) off.
    served += ["run_name=serve", f"policy_server.served_model_name={json.dumps(model['name'])}",
               "policy_server.enable_lora=true", 'policy_server.weight_sync="adapter"', 'policy_server.dev_mode="off"',
               f"policy_server.max_lora_rank={max(16, rank)}",
               f"policy_server.lora_modules={json.dumps([f'{name}={src.resolve()}'])}"]
    try:
        return load_config(config, [*served, *args]), src, model  # the command line's settings win
    except ConfigError as e:
        die(str(e))
