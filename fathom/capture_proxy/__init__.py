"""The capture proxy: records every model call of every rollout, token-faithfully, between the harness and vLLM.

`create_app(cfg, upstream_url=..., base_model=..., weight_sync=...)` builds the ASGI app; `fathom proxy serve`
runs it. See docs/capture_proxy.md for the routes and contracts.
"""

from fathom.capture_proxy.app import create_app

__all__ = ["create_app"]
