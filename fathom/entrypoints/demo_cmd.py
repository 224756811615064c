"""`fathom demo`: the main job on the embedded default.

Until the trainer lands it prepares the embedded model, starts vLLM, shows one chat answer
with its token ids and logprobs, and stops cleanly.
"""

from __future__ import annotations

import typer

from fathom.entrypoints.common import CONFIG_OPTION, config_from, die

QUESTION = "What is 2+3?"


def demo(ctx: typer.Context, config: str = CONFIG_OPTION) -> None:
    """Prepare the embedded model, serve it, show one answer with token ids and logprobs, stop."""
    cfg = config_from(ctx, config)
    from rich.console import Console
    from rich.table import Table

    from fathom.config.model import EMBEDDED
    from fathom.policy_server.client import PolicyClient, PolicyClientError
    from fathom.policy_server.launch import PolicyServerError
    from fathom.policy_server.models import ModelError, prepare_embedded
    from fathom.policy_server.start import start_policy_server

    console = Console()
    if cfg.model.name == EMBEDDED:
        try:
            with console.status("preparing the embedded model (SmolLM2-135M-Instruct)"):
                console.print(f"model: {prepare_embedded()}")
        except ModelError as e:
            die(str(e))
    try:
        server = start_policy_server(cfg)
    except (ModelError, PolicyServerError) as e:
        die(str(e))
    try:
        with PolicyClient(server.base_url) as client:
            resp = client.chat(
                cfg.policy_server.served_model_name,
                [{"role": "user", "content": QUESTION}],
                max_tokens=32,
                temperature=0.0,
            )
    except PolicyClientError as e:
        die(str(e))
    finally:
        server.stop()
    choice = resp["choices"][0]
    console.print(f"[bold]user:[/] {QUESTION}")
    console.print(f"[bold]policy:[/] {choice['message']['content']}")
    console.print(f"prompt token ids ({len(resp['prompt_token_ids'])}): {resp['prompt_token_ids']}")
    table = Table("token id", "token", "logprob")
    for tid, lp in zip(choice["token_ids"], choice["logprobs"]["content"]):
        table.add_row(str(tid), repr(lp["token"]), f"{lp['logprob']:.4f}")
    console.print(table)
    console.print(f"finish_reason={choice['finish_reason']}; vLLM stopped, log in {server.log_path}")
