"""Settings of the capture proxy (owned by the capture_proxy component)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fathom.config.base import FathomModel, local_url


class CaptureProxyConfig(FathomModel):
    host: str = "127.0.0.1"
    """Interface the proxy binds to."""

    port: int = 8100
    """Port of the proxy's OpenAI-compatible API."""

    @property
    def url(self) -> str:
        """The capture proxy's own base URL as a client on this machine reaches it."""
        return local_url(self.host, self.port)

    upstream_url: str = ""
    """Base URL of the policy server (without /v1); empty means http://{policy_server.host}:{policy_server.port}."""

    trainable_roles: Literal["root", "root+subcall"] = "root"
    """Which recorded calls become training rows: root turns only, or sub-calls too."""

    upstream_timeout_s: float = Field(600.0, gt=0)
    """Wall-clock limit of one upstream model call; past it the client gets 502 and the turn is recorded as failed."""

    upstream_connect_timeout_s: float = Field(5.0, gt=0)
    """Limit on opening a connection to the policy server (a refused or hanging connect fails fast)."""

    max_body_bytes: int = Field(8 * 1024 * 1024, gt=0)
    """Largest request body accepted; larger bodies get 413 before any parsing or upstream call."""

    session_ttl_s: float = Field(300.0, ge=0)
    """Seconds a closed session (summary and trace) stays readable before it is evicted."""

    idle_session_ttl_s: float = Field(6 * 3600.0, gt=0)
    """Seconds an open session may go without any request before it is treated as abandoned and evicted."""

    default_max_calls: int | None = Field(None, gt=0)
    """Model-call budget for sessions that do not set one (None: unlimited)."""

    default_max_tokens: int | None = Field(None, gt=0)
    """Token budget (prompt + completion, summed over calls) for sessions that do not set one (None: unlimited)."""

    default_max_depth: int | None = Field(None, ge=0)
    """Deepest sub-call depth for sessions that do not set one (None: unlimited)."""

    adapter_prefix: str = "trl-policy-v"
    """Name prefix of the policy adapters the trainer loads under adapter sync; `{prefix}{N}` is policy version N."""

    keep_messages: bool = True
    """Keep each call's request messages and reply text in the trace (for the trace viewer); off saves memory."""
