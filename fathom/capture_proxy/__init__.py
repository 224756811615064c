"""The capture proxy: records every model call of every rollout, token-faithfully, between the harness and vLLM.

`create_app(cfg, upstream_url=..., base_model=..., weight_sync=...)` builds the ASGI app; `fathom proxy serve`
runs it. See docs/capture_proxy.md for the routes and contracts. `fathom.capture_proxy.client` is its HTTP client.
"""

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    # Lazy, so importing the client (env server, rollout worker, eval) never loads the server side.
    if name == "create_app":
        from fathom.capture_proxy.app import create_app

        return create_app
    raise AttributeError(f"module 'fathom.capture_proxy' has no attribute {name!r}")
