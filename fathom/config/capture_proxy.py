"""Settings of the capture proxy (owned by the capture_proxy component)."""

from __future__ import annotations

from typing import Literal

from fathom.config.base import FathomModel


class CaptureProxyConfig(FathomModel):
    host: str = "127.0.0.1"
    """Interface the proxy binds to."""

    port: int = 8100
    """Port of the proxy's OpenAI-compatible API."""

    upstream_url: str = ""
    """Base URL of the policy server (without /v1); empty means http://{policy_server.host}:{policy_server.port}."""

    trainable_roles: Literal["root", "root+subcall"] = "root"
    """Which recorded calls become training rows: root turns only, or sub-calls too."""
