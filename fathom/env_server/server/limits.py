"""Guards at the env server's HTTP edge: a request body cap, and 422 messages a person can act on."""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable, Sequence


class BodyCap:
    """ASGI middleware: an HTTP body over `cap` bytes gets 413 before any route parses it.

    The body is read here (up to the cap) and replayed, so a client that sends no Content-Length, or a
    false one, is stopped at the cap as well.
    """

    def __init__(self, app: Callable[..., Awaitable[None]], cap: int, field: str) -> None:
        self.app, self.cap, self.field = app, cap, field

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        for k, v in scope.get("headers") or []:
            if k == b"content-length" and v.isdigit() and int(v) > self.cap:
                await self._too_large(send, f"request body is {int(v)} bytes")
                return
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.cap:
                await self._too_large(send, "request body")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body, replayed = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send: Callable, what: str) -> None:
        message = f"{what} exceeds the {self.cap}-byte cap ({self.field}); send less, or raise the cap"
        body = json.dumps({"detail": message, "message": message}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def request_error_message(method: str, path: str, errors: Sequence[Any]) -> str:
    """One line from FastAPI's validation errors: which route, which field, what was wrong."""
    parts = []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ())]
        where = ".".join(loc[1:]) if loc[:1] == ["body"] else ".".join(loc)
        if err.get("type") == "json_invalid":
            parts.append(f"body is not valid JSON ({err.get('ctx', {}).get('error', err.get('msg'))})")
        else:
            parts.append(f"{where or 'body'}: {err.get('msg')}")
    return f"{method} {path} is invalid: " + "; ".join(parts) + "; see the schema at /openapi.json"
