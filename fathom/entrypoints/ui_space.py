"""The app file of `fathom ui` as a Hugging Face Space (Gradio SDK): settings come from the environment.

    FATHOM_UI_BASE_URL   the OpenAI-compatible endpoint (a Space secret or variable), e.g. https://...:8000
    FATHOM_UI_MODEL      the model selected when the page opens (optional)
    FATHOM_UI_TOKENIZER  the served model's tokenizer directory, for the token path (optional)
    FATHOM_UI_CONFIG     a config file (optional; default: the config defaults)

Spaces route traffic to 0.0.0.0:7860 (`GRADIO_SERVER_NAME`/`GRADIO_SERVER_PORT` override it).
"""

from __future__ import annotations

import os


def main() -> None:
    from fathom.config import load_config
    from fathom.entrypoints.common import die
    from fathom.policy_server.served import ServedError
    from fathom.ui.serve import serve

    cfg = load_config(os.environ.get("FATHOM_UI_CONFIG") or None, [])
    try:
        serve(cfg, os.environ.get("FATHOM_UI_BASE_URL", "http://127.0.0.1:8000"),
              model=os.environ.get("FATHOM_UI_MODEL"), tokenizer=os.environ.get("FATHOM_UI_TOKENIZER"), max_turns=None,
              host=os.environ.get("GRADIO_SERVER_NAME", "0.0.0.0"), port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    except ServedError as e:
        die(str(e))


if __name__ == "__main__":
    main()
