"""Shared-token and bind-address rules for the servers that listen on the network (capture proxy, env server).

Both servers bind to loopback by default. Past loopback they refuse to start without a shared
token, and then answer every request but their health probe only when it carries the token.
The token comes from the config's `shared_token` or, preferably, from `$FATHOM_SHARED_TOKEN`, so it
never sits in a TOML file, on a command line or in the resolved config.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
from typing import Any, Awaitable, Callable, Iterable

from pydantic import SecretStr

from fathom.config.base import ConfigError

SHARED_TOKEN_ENV = "FATHOM_SHARED_TOKEN"

# Environment variables that hold credentials; they must never reach a log, trace, run directory,
# model card or sandbox. Tests plant them and scan every output.
SECRET_ENV_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", SHARED_TOKEN_ENV)


def shared_token(configured: SecretStr | str | None = None) -> str | None:
    """The shared token: the configured one, else `$FATHOM_SHARED_TOKEN`, else None (no token)."""
    if isinstance(configured, SecretStr):
        configured = configured.get_secret_value()
    token = configured or os.environ.get(SHARED_TOKEN_ENV) or ""
    return token.strip() or None


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def check_bind(host: str, token: str | None, what: str, field: str) -> None:
    """Refuse a non-loopback bind without a shared token; the message names the field and the fix."""
    if token or is_loopback(host):
        return
    raise ConfigError(
        f"{what} would bind to {host!r} ({field}), which other machines can reach, without a shared token: "
        f"set {SHARED_TOKEN_ENV} (or shared_token in the config) on the server and on every client, "
        f"or bind to 127.0.0.1")


TOKEN_HEADER = b"x-fathom-token"  # protocol.HEADER_SHARED_TOKEN, as ASGI spells header names


class SharedTokenGate:
    """ASGI middleware: with a token set, every HTTP or WebSocket request outside `open_paths` must carry it, as
    `X-Fathom-Token: <token>` or (with `bearer=True`) `Authorization: Bearer <token>`; others get 401.

    The proxy passes `bearer=False`: there, Authorization is the session id. The 401 body has both the proxy's
    `{"error": {...}}` and FastAPI's `{"detail": ...}` shapes, so each server's clients read it as usual.
    """

    def __init__(self, app: Callable[..., Awaitable[None]], token: str | None, *, open_paths: Iterable[str] = (),
                 bearer: bool = True, what: str = "server") -> None:
        self.app, self.bearer, self.what = app, bearer, what
        self.token = token.encode() if token else None
        self.open_paths = frozenset(open_paths)

    def __getattr__(self, name: str) -> Any:  # `.state` and friends of the wrapped app stay reachable
        return getattr(self.app, name)

    def _allowed(self, headers: list[tuple[bytes, bytes]]) -> bool:
        assert self.token is not None
        for k, v in headers:
            if k == TOKEN_HEADER and hmac.compare_digest(v.strip(), self.token):
                return True
            if self.bearer and k == b"authorization":
                scheme, _, value = v.partition(b" ")
                if scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), self.token):
                    return True
        return False

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if (self.token is None or scope["type"] not in ("http", "websocket") or scope.get("path") in self.open_paths
                or self._allowed(scope.get("headers") or [])):
            await self.app(scope, receive, send)
            return
        how = "X-Fathom-Token: <token>" + (" or Authorization: Bearer <token>" if self.bearer else "")
        message = (f"this {self.what} requires the shared token: send {how} "
                   f"(clients read it from {SHARED_TOKEN_ENV} or the config's shared_token)")
        if scope["type"] == "websocket":  # closing before accept answers the handshake with 403
            await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
            return
        body = json.dumps({"error": {"message": message, "type": "authentication_error", "code": "invalid_token"},
                           "detail": message}).encode()
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": body})


__all__ = ["SECRET_ENV_VARS", "SHARED_TOKEN_ENV", "SharedTokenGate", "check_bind", "is_loopback", "shared_token"]
