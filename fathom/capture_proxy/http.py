"""The proxy's HTTP edge: domain errors to statuses (one table), JSON responses, capped body reads, session keys."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from fathom.capture_proxy import errors as E
from fathom.capture_proxy.capture import parse_json
from fathom.protocol import HEADER_API_KEY


_TYPES = {401: "authentication_error", 404: "not_found_error", 409: "conflict_error", 413: "request_too_large",
          429: "budget_exceeded", 502: "upstream_error", 503: "upstream_unavailable"}


# The one place a domain error becomes a status. A subclass not listed maps through its base class.
STATUS: dict[type[E.ProxyError], int] = {
    E.InvalidRequest: 400, E.SessionRequired: 401, E.UnknownSession: 404, E.UnknownServedModel: 404,
    E.Conflict: 409, E.BodyTooLarge: 413, E.InvalidSessionSpec: 422, E.BudgetExhausted: 429,
    E.InvalidCapture: 500, E.UpstreamFailed: 502, E.PolicyUnavailable: 503,
}


def status_of(e: E.ProxyError) -> int:
    if isinstance(e, E.UpstreamFailed) and e.status is not None:
        return e.status
    for cls in type(e).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def error_response(e: E.ProxyError) -> Response:
    return error(status_of(e), e.message, e.code, e.headers)


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
        raise E.BodyTooLarge(f"request body is {length} bytes, over the {cap}-byte cap (capture_proxy.max_body_bytes)")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise E.BodyTooLarge(f"request body exceeds the {cap}-byte cap (capture_proxy.max_body_bytes)")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw:
        return None
    return parse_json(raw, "request body")


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
