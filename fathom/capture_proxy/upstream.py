"""A small keep-alive HTTP/1.1 client for the one upstream the proxy talks to (vLLM).

Why not httpx: on this machine an httpx.AsyncClient round trip costs ~0.9-1.5 ms of client-side
work, more than the proxy's whole added-latency target (1 ms). The upstream is a single known
OpenAI-compatible server and every call is a non-streaming JSON POST or GET, so a pool of plain
asyncio stream connections covers it in ~0.2 ms.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from urllib.parse import urlsplit


class UpstreamError(Exception):
    """The engine could not answer: `kind` is timeout, unavailable or protocol."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(slots=True)
class UpstreamResponse:
    status: int
    body: bytes


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 - closing a dead socket may raise anything; nothing to do
            pass


class UpstreamClient:
    """Pooled HTTP/1.1 connections to `base_url`; every failure becomes an `UpstreamError`."""

    def __init__(self, base_url: str, *, timeout_s: float, connect_timeout_s: float, max_idle: int = 128) -> None:
        parts = urlsplit(base_url.rstrip("/"))
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(
                f"upstream URL {base_url!r} must look like http://HOST:PORT (the policy server speaks plain HTTP)"
            )
        self.base_url = base_url.rstrip("/")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_idle = max_idle
        self._idle: list[_Conn] = []
        self._host_header = f"{self.host}:{self.port}".encode()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    async def get(self, path: str, timeout_s: float | None = None) -> UpstreamResponse:
        return await self.request("GET", path, None, timeout_s)

    async def post(self, path: str, body: bytes, timeout_s: float | None = None) -> UpstreamResponse:
        return await self.request("POST", path, body, timeout_s)

    async def request(self, method: str, path: str, body: bytes | None, timeout_s: float | None = None) -> UpstreamResponse:
        head = [f"{method} {self.prefix}{path} HTTP/1.1".encode(), b"host: " + self._host_header]
        if body is not None:
            head += [b"content-type: application/json", b"content-length: " + str(len(body)).encode()]
        raw = b"\r\n".join(head) + b"\r\n\r\n" + (body or b"")
        limit = timeout_s if timeout_s is not None else self.timeout_s
        try:
            async with asyncio.timeout(limit):
                return await self._send(raw)
        except TimeoutError:
            raise UpstreamError("timeout", f"upstream {self.base_url} did not answer {method} {path} within {limit:g} s") from None

    async def _send(self, raw: bytes) -> UpstreamResponse:
        while self._idle:
            conn = self._idle.pop()
            try:
                return await self._exchange(conn, raw)
            except _StaleConnection:
                # The server closed an idle keep-alive connection before reading our request
                # (uvicorn drops idle ones after 5 s); nothing reached it, so a fresh one is safe.
                conn.close()
        conn = await self._connect()
        try:
            return await self._exchange(conn, raw)
        except _StaleConnection as e:
            conn.close()
            raise UpstreamError("unavailable", f"upstream {self.base_url} closed the connection without answering") from e

    async def _connect(self) -> _Conn:
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                reader, writer = await asyncio.open_connection(self.host, self.port, limit=1 << 22)
        except TimeoutError:
            raise UpstreamError(
                "unavailable", f"connecting to upstream {self.base_url} timed out after {self.connect_timeout_s:g} s"
            ) from None
        except OSError as e:
            raise UpstreamError("unavailable", f"cannot connect to upstream {self.base_url}: {e.strerror or e}") from None
        return _Conn(reader, writer)

    async def _exchange(self, conn: _Conn, raw: bytes) -> UpstreamResponse:
        got_bytes = False
        try:
            conn.writer.write(raw)
            await conn.writer.drain()
            status_line = await conn.reader.readline()
            if not status_line:
                raise _StaleConnection()
            got_bytes = True
            status, headers = _parse_head(status_line, await conn.reader.readuntil(b"\r\n\r\n"))
            if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
                body = await _read_chunked(conn.reader)
            elif b"content-length" in headers:
                body = await conn.reader.readexactly(int(headers[b"content-length"]))
            else:
                body = await conn.reader.read()
                headers[b"connection"] = b"close"
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
            conn.close()
            if not got_bytes and isinstance(e, (ConnectionError, asyncio.IncompleteReadError)):
                raise _StaleConnection() from e
            raise UpstreamError("unavailable", f"upstream {self.base_url} broke the connection mid-answer: {e!r}") from None
        except BaseException:
            # Timeout or cancellation mid-exchange: the connection is in an unknown state.
            conn.close()
            raise
        if headers.get(b"connection", b"").lower() == b"close" or len(self._idle) >= self.max_idle:
            conn.close()
        else:
            self._idle.append(conn)
        return UpstreamResponse(status, body)


class _StaleConnection(Exception):
    pass


def _parse_head(status_line: bytes, rest: bytes) -> tuple[int, dict[bytes, bytes]]:
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
        raise ValueError(f"bad status line {status_line[:80]!r}")
    headers: dict[bytes, bytes] = {}
    for line in rest.split(b"\r\n"):
        if line:
            k, _, v = line.partition(b":")
            headers[k.strip().lower()] = v.strip()
    return int(parts[1]), headers


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size = int((await reader.readline()).split(b";")[0].strip(), 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # end of (empty) trailers
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readexactly(2)
