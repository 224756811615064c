"""The proxy's HTTP/1.1 client for the one upstream it talks to (vLLM): h11 framing under a small pool.

Why h11 under our own pool, not httpx or aiohttp: `bench/capture_proxy.py` measures all three
side by side (its `upstream_clients` rows; numbers in docs/capture_proxy.md). h11 does the protocol
(chunked bodies and trailers, bodiless statuses such as 204, read-until-close, list-valued
`Connection`/`Transfer-Encoding`) and the pool does only what the proxy needs: a connection cap,
an idle lifetime below the server's keep-alive timeout, and a retry rule that can never send a
chat completion twice.

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

import h11

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


class _Conn:
    __slots__ = ("reader", "writer", "h11", "idle_since")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.h11 = h11.Connection(h11.CLIENT)
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
        headers = [(b"host", self._host_header)]
        if body is not None:
            headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        req = h11.Request(method=method, target=f"{self.prefix}{path}", headers=headers)
        limit = timeout_s if timeout_s is not None else self.timeout_s
        try:
            async with asyncio.timeout(limit):
                # Waiting for a free connection slot counts toward the call's time limit.
                async with self._slots:
                    return await self._send(req, body)
        except TimeoutError:
            raise UpstreamError("timeout", f"upstream {self.base_url} did not answer {method} {path} within {limit:g} s") from None
        except UpstreamError:
            raise
        except (OSError, EOFError) as e:
            raise UpstreamError("unavailable", f"upstream {self.base_url} failed on {method} {path}: {e!r}") from None
        except Exception as e:  # noqa: BLE001 - the contract is "every failure is an UpstreamError"
            raise UpstreamError("protocol", f"upstream {self.base_url} broke HTTP on {method} {path}: {e!r}") from None

    async def _send(self, req: h11.Request, body: bytes | None) -> UpstreamResponse:
        conn = self._checkout()
        if conn is not None:
            try:
                return await self._exchange(conn, req, body)
            except _NothingSent:
                pass  # the server closed it while idle; nothing reached it, so one fresh try is safe
        conn = await self._connect()
        try:
            return await self._exchange(conn, req, body)
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

    async def _exchange(self, conn: _Conn, req: h11.Request, body: bytes | None) -> UpstreamResponse:
        h = conn.h11
        if conn.closed_by_peer():
            conn.close()
            raise _NothingSent()
        ok, eof = False, False
        try:
            data = h.send(req)
            if body is not None:
                data += h.send(h11.Data(data=body))
            data += h.send(h11.EndOfMessage())
            conn.writer.write(data)
            await conn.writer.drain()
            status, out, eof = 0, bytearray(), False
            while True:
                event = h.next_event()
                if event is h11.NEED_DATA:
                    chunk = await conn.reader.read(_READ_CHUNK)
                    eof = not chunk
                    h.receive_data(chunk)  # b"" tells h11 about EOF
                elif isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    out += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    raise UpstreamError("unavailable", f"upstream {self.base_url} closed the connection without answering")
                # InformationalResponse (1xx): keep reading for the final answer.
            ok = True
        except h11.RemoteProtocolError as e:
            kind = "unavailable" if eof else "protocol"
            raise UpstreamError(kind, f"upstream {self.base_url} broke the answer: {e}") from None
        finally:
            if not ok:
                # Timeout, cancellation or error mid-exchange: the connection is in an unknown state.
                conn.close()
        if self._reusable(conn):
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()  # `Connection: close`, or a body read until EOF
        return UpstreamResponse(status, bytes(out))

    @staticmethod
    def _reusable(conn: _Conn) -> bool:
        h = conn.h11
        if h.our_state is not h11.DONE or h.their_state is not h11.DONE or conn.closed_by_peer():
            return False
        try:
            h.start_next_cycle()  # refuses when either side asked to close
        except h11.LocalProtocolError:
            return False
        return True
