"""Small HTTP helpers shared by the proxy's routes: JSON errors, capped body reads, session keys."""

from __future__ import annotations

import json
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from fathom.protocol import HEADER_API_KEY


class HTTPFail(Exception):
    """Ends a request with a JSON error; the message says what was wrong and what to do."""

    def __init__(self, status: int, message: str, code: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}

    def response(self) -> Response:
        return error(self.status, self.message, self.code, self.headers)


_TYPES = {401: "authentication_error", 404: "not_found_error", 409: "conflict_error", 413: "request_too_large",
          429: "budget_exceeded", 502: "upstream_error", 503: "upstream_unavailable"}


def error(status: int, message: str, code: str, headers: dict[str, str] | None = None) -> Response:
    typ = _TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    body = {"error": {"message": message, "type": typ, "code": code}}
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json", headers=headers)


async def read_json(request: Request, cap: int) -> Any:
    """The request body parsed as JSON, refusing bodies over `cap` bytes before reading them whole."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > cap:
        raise HTTPFail(413, f"request body is {length} bytes, over the {cap}-byte cap (capture_proxy.max_body_bytes)",
                       "body_too_large")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise HTTPFail(413, f"request body exceeds the {cap}-byte cap (capture_proxy.max_body_bytes)", "body_too_large")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw:
        return None
    return parse_json(raw, "request body")


def parse_json(raw: bytes, what: str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        # The stdlib parser also reads NaN/Infinity, which a broken engine may emit; validation
        # must see those values to flag the turn rather than fail to parse it.
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise HTTPFail(400, f"{what} is not valid JSON ({e}); send a JSON object", "invalid_json") from None


def session_key(request: Request) -> str | None:
    """The session id: `Authorization: Bearer <id>`, or `x-api-key` (the HF Jobs proxy strips Authorization)."""
    headers = request.headers
    auth = headers.get("authorization")
    if auth:
        scheme, _, token = auth.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    key = headers.get(HEADER_API_KEY)
    return key.strip() if key else None
