"""Serve `fathom ui`'s page: the backend (episode runtime per served base) and the Gradio app, until Ctrl-C.

Shared by the `fathom ui` command and the Hugging Face Space app file (`fathom.entrypoints.ui_space`).
"""

from __future__ import annotations

import sys
import threading
from typing import Any


def serve(cfg: Any, base_url: str, *, model: str | None, tokenizer: str | None, max_turns: int | None, host: str,
          port: int, start_timeout_s: float | None = None) -> None:
    """Build the backend and the page, serve until Ctrl-C, then stop the sandbox and the proxy. Raises
    `ServedError` when `model` is not among the models the endpoint serves."""
    from fathom.policy_server.served import ServedError
    from fathom.tasks import configure
    from fathom.ui.app import build_app, launch
    from fathom.ui.backend import START_TIMEOUT_S, Backend
    from fathom.ui.live import example_tasks

    configure(cfg.tasks)  # imported examples resolve from cfg.tasks.store_dir
    backend = Backend(cfg, base_url, tokenizer=tokenizer, max_turns=max_turns,
                      start_timeout_s=start_timeout_s or START_TIMEOUT_S)
    try:
        try:
            names = [n for _, n in backend.models()]
        except ServedError as e:  # the page still starts: the endpoint may come up later (↻ asks again)
            print(f"warning: {e}", file=sys.stderr)
            names = []
        if model is not None and names and model not in names:
            raise ServedError(f"--model {model!r} is not served at {base_url}; it serves: {', '.join(names)}")
        if names:
            # The sandbox and the token path start while the page loads; a failure shows on the first run instead.
            threading.Thread(target=lambda: _warm(backend, model or names[-1]), daemon=True).start()
        print(f"fathom ui on http://{host}:{port} against {base_url} ({', '.join(names) or 'no models yet'})",
              file=sys.stderr)
        launch(build_app(backend, default_model=model, endpoint=base_url, examples=example_tasks(cfg.tasks)),
               host=host, port=port)
    finally:
        backend.close()


def _warm(backend: Any, model: str) -> None:
    try:
        backend.warm(model)
    except Exception as e:  # noqa: BLE001 - reported here and again, with the page, on the first episode
        from fathom.ui.errors import error_text

        print(f"warning: {model}: {error_text(e)}", file=sys.stderr)
