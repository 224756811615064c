"""Start the policy server a config describes and wait until it is healthy, with a progress line."""

from __future__ import annotations

from typing import Any

from fathom.policy_server.launch import PolicyServer


def start_policy_server(cfg: Any, enforce_eager: bool | None = None, quiet: bool = False) -> PolicyServer:
    """Resolve the model, start vLLM, wait for health with a progress line on stderr. Returns the running server.
    Raises `ModelError` (the model cannot be resolved) or `PolicyServerError` (vLLM did not come up; it is
    stopped), and stops vLLM on any other exit too."""
    from rich.console import Console

    from fathom.config import write_resolved
    from fathom.policy_server.models import resolve_model

    if enforce_eager is not None:
        cfg.policy_server.enforce_eager = enforce_eager
    served = cfg.server_model or cfg.model  # the cross-checks guarantee they agree
    path = resolve_model(served)
    write_resolved(cfg)
    server = PolicyServer(cfg.policy_server, served, path, cfg.run_dir / "logs")
    console = Console(stderr=True, quiet=quiet)
    try:
        server.start()
        with console.status(f"starting vLLM on {server.base_url} (log: {server.log_path})") as status:
            waited = server.wait_healthy(on_tick=lambda s: status.update(f"starting vLLM on {server.base_url}: {s:.0f} s"))
    except BaseException:
        server.stop()
        raise
    console.print(f"vLLM healthy on {server.base_url} after {waited:.1f} s; serving {path} as {cfg.policy_server.served_model_name!r}")
    return server
