"""`fathom ui`: an interactive page that runs one RLM episode at a time and shows its tree as it grows.

    fathom ui --base-url http://127.0.0.1:8000 [--model fathom] [--host 127.0.0.1 --port 7860]

It runs against any OpenAI-compatible endpoint (vLLM, or `fathom env scripted`), on the token path when the
endpoint tokenizes, with a capture proxy and a sandbox of its own (the machinery of `fathom ask`). As a
Hugging Face Space (Gradio SDK), `fathom.entrypoints.ui_space` is the app file; see docs/ui.md. The page
and its backend live in `fathom.ui`.
"""

from __future__ import annotations

import typer

from fathom.entrypoints.common import CONFIG_OPTION, OVERRIDE_SETTINGS, config_from, die


def ui(
    ctx: typer.Context,
    base_url: str = typer.Option("http://127.0.0.1:8000", envvar="FATHOM_UI_BASE_URL",
                                 help="OpenAI-compatible server (vLLM) root, without /v1."),
    model: str = typer.Option(None, help="Model selected when the page opens (default: the last listed, an adapter "
                                         "when one is loaded)."),
    host: str = typer.Option("127.0.0.1", help="Bind address; 0.0.0.0 exposes the page (and the endpoint's models) "
                                               "to the network."),
    port: int = typer.Option(7860, help="Port."),
    max_turns: int = typer.Option(None, help="Root turns per episode (default: env_server.max_turns)."),
    tokenizer: str = typer.Option(None, help="Directory of the served model's tokenizer (token path); default: the "
                                             "base model's name resolved locally, else the chat path."),
    start_timeout: float = typer.Option(None, help="Seconds a run waits for the episode runtime (sandbox, tokenizer, "
                                                   "template check) to start before the page says so (default 120)."),
    config: str = CONFIG_OPTION,
) -> None:
    """Serve a page that runs RLM episodes over a pasted or uploaded document and shows each turn live."""
    cfg = config_from(ctx, config)
    from fathom.policy_server.served import ServedError
    from fathom.ui.serve import serve

    try:
        serve(cfg, base_url, model=model, tokenizer=tokenizer, max_turns=max_turns, host=host, port=port,
              start_timeout_s=start_timeout)
    except ServedError as e:
        die(str(e))


def register(app: typer.Typer) -> None:
    app.command("ui", context_settings=OVERRIDE_SETTINGS)(ui)
