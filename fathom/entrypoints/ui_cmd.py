"""`fathom ui`: an interactive page that runs one RLM episode at a time and shows its tree as it grows.

    fathom ui --base-url http://127.0.0.1:8000 [--model fathom] [--host 127.0.0.1 --port 7860]

It runs against any OpenAI-compatible endpoint (vLLM, or `fathom env scripted`), on the token path when the
endpoint tokenizes, with a capture proxy and a sandbox of its own (the machinery of `fathom ask`). As a
Hugging Face Space (Gradio SDK), `fathom.entrypoints.ui_space` is the app file; see docs/ui.md.
"""

from __future__ import annotations

import typer

from fathom.entrypoints.common import CONFIG_OPTION, OVERRIDE_SETTINGS, config_from, die, eprint


def serve(cfg, base_url: str, *, model: str | None, tokenizer: str | None, max_turns: int | None, host: str,
          port: int, start_timeout_s: float | None = None) -> None:
    """Build the backend and the page, serve until Ctrl-C, then stop the sandbox and the proxy."""
    from fathom.entrypoints.served import ServedError
    from fathom.ui.backend import Backend
    from fathom.tasks import configure
    from fathom.ui.app import build_app, launch
    from fathom.ui.live import example_tasks

    configure(cfg.tasks)  # imported examples resolve from cfg.tasks.store_dir

    from fathom.ui.backend import START_TIMEOUT_S

    backend = Backend(cfg, base_url, tokenizer=tokenizer, max_turns=max_turns,
                      start_timeout_s=start_timeout_s or START_TIMEOUT_S)
    try:
        try:
            names = [n for _, n in backend.models()]
        except ServedError as e:  # the page still starts: the endpoint may come up later (↻ asks again)
            eprint(f"warning: {e}")
            names = []
        if model is not None and names and model not in names:
            die(f"--model {model!r} is not served at {base_url}; it serves: {', '.join(names)}")
        if names:
            import threading

            # The sandbox and the token path start while the page loads; a failure shows on the first run instead.
            threading.Thread(target=lambda: _warm(backend, model or names[-1]), daemon=True).start()
        eprint(f"fathom ui on http://{host}:{port} against {base_url} ({', '.join(names) or 'no models yet'})")
        launch(build_app(backend, default_model=model, endpoint=base_url, examples=example_tasks(cfg.tasks)),
               host=host, port=port)
    finally:
        backend.close()


def _warm(backend, model: str) -> None:
    try:
        backend.warm(model)
    except Exception as e:  # noqa: BLE001 - reported here and again, with the page, on the first episode
        from fathom.ui.errors import error_text

        eprint(f"warning: {model}: {error_text(e)}")


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
    serve(cfg, base_url, model=model, tokenizer=tokenizer, max_turns=max_turns, host=host, port=port,
          start_timeout_s=start_timeout)


def register(app: typer.Typer) -> None:
    app.command("ui", context_settings=OVERRIDE_SETTINGS)(ui)
