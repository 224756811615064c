"""The proxy's HTTP/1.1 client for the one upstream it talks to (vLLM): httptools (llhttp) parsing
under a small pool.

Why httptools under our own pool, not httpx, aiohttp or h11: `bench/capture_proxy.py` measures them
side by side (its `upstream_clients` rows; numbers in docs/capture_proxy.md). llhttp, the parser of
Node.js, does the protocol (chunked bodies and trailers, bodiless statuses such as 204,
list-valued `Connection`/`Transfer-Encoding`, keep-alive rules); the pool does only what the proxy
needs: a connection cap, an idle lifetime below the server's keep-alive timeout, and a retry rule
that can never send a chat completion twice. Requests are ours and fixed-form (a JSON POST or a
GET to a known path), so they are written directly.

Retry rule: at most once, only for a reused connection, and only when nothing was sent on it
(the server had already closed it when we were about to write). Once request bytes are written,
any failure is an `UpstreamError`: the engine may have run the request, and generating it twice
would change what the session records.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

_READ_CHUNK = 1 << 18


class UpstreamError(Exception):
    """The engine could not answer: `kind` is timeout, unavailable or protocol."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(slots=True)
class UpstreamResponse:
    status: int
    body: bytes


class _NothingSent(Exception):
    """The pooled connection was already closed by the server before we wrote anything on it."""


class _Answer:
    """Callback target of llhttp for the responses read on one connection."""

    __slots__ = ("parser", "body", "done", "headers_done", "framed", "keep_alive", "messages")

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.messages = 0
        self.reset()

    def reset(self) -> None:
        self.body = bytearray()
        self.done = self.headers_done = self.framed = self.keep_alive = False

    def on_message_begin(self) -> None:
        self.messages += 1

    def on_header(self, name: bytes, _value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.headers_done = True
        # llhttp answers this only until the message completes (it reports False afterwards).
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.done = True


class _Conn:
    __slots__ = ("reader", "writer", "idle_since")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.idle_since = 0.0

    def closed_by_peer(self) -> bool:
        return self.reader.at_eof() or self.writer.transport.is_closing()

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 - closing a dead socket may raise anything; nothing to do
            pass


class UpstreamClient:
    """Pooled HTTP/1.1 connections to `base_url`; every failure becomes an `UpstreamError`."""

    def __init__(self, base_url: str, *, timeout_s: float, connect_timeout_s: float, max_connections: int = 256,
                 idle_ttl_s: float = 4.0) -> None:
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
        self.max_connections = max_connections
        # uvicorn (vLLM's server) drops keep-alive connections idle for 5 s; retiring ours sooner
        # keeps the server's close from racing our next request on that connection.
        self.idle_ttl_s = idle_ttl_s
        self._idle: deque[_Conn] = deque()
        self._slots = asyncio.Semaphore(max_connections)
        host = f"[{self.host}]" if ":" in self.host else self.host  # RFC 7230: IPv6 literals in brackets
        self._host_header = f"{host}:{self.port}".encode()

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, deque()
        for conn in idle:
            conn.close()

    async def get(self, path: str, timeout_s: float | None = None) -> UpstreamResponse:
        return await self.request("GET", path, None, timeout_s)

    async def post(self, path: str, body: bytes, timeout_s: float | None = None) -> UpstreamResponse:
        return await self.request("POST", path, body, timeout_s)

    async def request(self, method: str, path: str, body: bytes | None,
                      timeout_s: float | None = None) -> UpstreamResponse:
        if not path.startswith("/") or any(c in path for c in " \r\n"):
            raise ValueError(f"upstream path {path!r} must start with / and hold no spaces or line breaks")
        head = [f"{method} {self.prefix}{path} HTTP/1.1".encode(), b"host: " + self._host_header]
        if body is not None:
            head += [b"content-type: application/json", b"content-length: " + str(len(body)).encode()]
        raw = b"\r\n".join(head) + b"\r\n\r\n" + (body or b"")
        limit = timeout_s if timeout_s is not None else self.timeout_s
        try:
            async with asyncio.timeout(limit):
                # Waiting for a free connection slot counts toward the call's time limit.
                async with self._slots:
                    return await self._send(raw)
        except TimeoutError:
            raise UpstreamError("timeout", f"upstream {self.base_url} did not answer {method} {path} within {limit:g} s") from None
        except UpstreamError:
            raise
        except (OSError, EOFError) as e:
            raise UpstreamError("unavailable", f"upstream {self.base_url} failed on {method} {path}: {e!r}") from None
        except Exception as e:  # noqa: BLE001 - the contract is "every failure is an UpstreamError"
            raise UpstreamError("protocol", f"upstream {self.base_url} broke HTTP on {method} {path}: {e!r}") from None

    async def _send(self, raw: bytes) -> UpstreamResponse:
        conn = self._checkout()
        if conn is not None:
            try:
                return await self._exchange(conn, raw)
            except _NothingSent:
                pass  # the server closed it while idle; nothing reached it, so one fresh try is safe
        conn = await self._connect()
        try:
            return await self._exchange(conn, raw)
        except _NothingSent:
            raise UpstreamError("unavailable", f"upstream {self.base_url} closed a new connection at once") from None

    def _checkout(self) -> _Conn | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()  # newest first: the least likely to have been closed by the server
            if now - conn.idle_since < self.idle_ttl_s and not conn.closed_by_peer():
                return conn
            conn.close()
        return None

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
        if conn.closed_by_peer():
            conn.close()
            raise _NothingSent()
        answer = _Answer()
        parser = answer.parser
        reusable, ok = True, False
        try:
            conn.writer.write(raw)
            await conn.writer.drain()
            while True:
                chunk = await conn.reader.read(_READ_CHUNK)
                if not chunk:
                    status = parser.get_status_code() if answer.headers_done else 0
                    if answer.headers_done and not answer.framed and status >= 200 and status not in (204, 304):
                        reusable = False  # neither length nor chunking: the body ends when the server closes
                        break
                    what = "mid-answer" if answer.messages else "without answering"
                    raise UpstreamError("unavailable", f"upstream {self.base_url} closed the connection {what}")
                try:
                    parser.feed_data(chunk)
                except httptools.HttpParserUpgrade:
                    raise UpstreamError("protocol", f"upstream {self.base_url} switched protocols") from None
                except httptools.HttpParserError:
                    if not answer.done:
                        raise
                    reusable = False  # bytes after a complete answer: this connection cannot be trusted
                if answer.done:
                    if parser.get_status_code() < 200:
                        answer.reset()  # 1xx: the final answer follows on the same connection
                        continue
                    break
            status = parser.get_status_code()
            ok = True
        except httptools.HttpParserError as e:
            raise UpstreamError("protocol", f"upstream {self.base_url} sent a malformed answer: {e}") from None
        finally:
            if not ok:
                # Timeout, cancellation or error mid-exchange: the connection is in an unknown state.
                conn.close()
        if reusable and answer.messages == 1 and answer.keep_alive and not conn.closed_by_peer():
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()  # `Connection: close`, a body read until EOF, or stray bytes
        return UpstreamResponse(status, bytes(answer.body))
