"""The pooled upstream client against raw servers that misbehave the ways real ones do.

Each test names an HTTP/1.1 case the proxy must survive: keep-alive reuse, chunked bodies with
trailers, bodiless statuses, resets before and in the middle of an answer, timeouts, list-valued
headers, IPv6 hosts, a connection cap, and how many times a request reaches the engine.
"""

from __future__ import annotations

import asyncio
import errno

import pytest

from fathom.capture_proxy import upstream as up
from fathom.capture_proxy.upstream import UpstreamClient, UpstreamError
from tests.ports import free_port


async def _raw_server(handler):
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _read_request(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, await reader.readexactly(length)


def _serve_each(answers, seen=None, connections=None):
    """A keep-alive server answering the i-th request on any connection with answers[i] (bytes or a coroutine fn)."""
    count = [0]

    async def handler(reader, writer):
        if connections is not None:
            connections.append(1)
        try:
            while True:
                try:
                    head, _ = await _read_request(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                if seen is not None:
                    seen.append(head)
                i = count[0]
                count[0] += 1
                answer = answers[min(i, len(answers) - 1)]
                if callable(answer):
                    if await answer(reader, writer) == "close":
                        return
                else:
                    writer.write(answer)
                    await writer.drain()
        finally:
            writer.close()

    return handler


def _run(handler, body, **client_kw):
    async def main():
        server, port = await _raw_server(handler)
        client = UpstreamClient(f"http://127.0.0.1:{port}", timeout_s=client_kw.pop("timeout_s", 5),
                                connect_timeout_s=1, **client_kw)
        try:
            return await body(client)
        finally:
            await client.aclose()
            server.close()

    return asyncio.run(main())


OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


def test_chunked_body_and_keepalive_reuse():
    connections = []
    chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"

    async def body(client):
        return [(await client.post("/x", b"{}")).body for _ in range(3)]

    assert _run(_serve_each([chunked], connections=connections), body) == [b"hello world"] * 3
    assert len(connections) == 1


def test_chunked_trailers_leave_the_pooled_connection_clean():
    # Trailers after the last chunk used to stay in the buffer and poison the next answer's status line.
    connections, seen = [], []
    with_trailers = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-checksum\r\n\r\n"
                     b"2\r\nok\r\n0\r\nx-checksum: 123\r\nx-more: 4\r\n\r\n")

    async def body(client):
        return [await client.post("/x", b"{}") for _ in range(3)]

    out = _run(_serve_each([with_trailers], seen=seen, connections=connections), body)
    assert [(r.status, r.body) for r in out] == [(200, b"ok")] * 3
    assert len(seen) == 3 and len(connections) == 1


def test_204_without_length_answers_at_once():
    async def body(client):
        first = await client.post("/x", b"{}")
        second = await client.post("/x", b"{}")
        return first, second

    out = _run(_serve_each([b"HTTP/1.1 204 No Content\r\n\r\n", OK]), body, timeout_s=2)
    assert (out[0].status, out[0].body) == (204, b"") and out[1].body == b"ok"


def test_body_read_until_close_when_no_length_is_given():
    async def answer(reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nall of it")
        await writer.drain()
        return "close"

    async def body(client):
        r = await client.get("/x")
        return r, client.idle_connections

    r, idle = _run(_serve_each([answer]), body, timeout_s=2)
    assert r.body == b"all of it" and idle == 0


def test_list_valued_connection_header_closes():
    connections = []
    closing = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: keep-alive, close\r\n\r\nok"

    async def body(client):
        a = await client.post("/x", b"{}")
        idle = client.idle_connections
        b = await client.post("/x", b"{}")
        return a.body, b.body, idle

    assert _run(_serve_each([closing], connections=connections), body) == (b"ok", b"ok", 0)
    assert len(connections) == 2


def test_reset_after_reading_a_post_sends_it_once():
    """The server reads the POST (it may have run it) and drops the connection: never re-send it."""
    seen = []

    async def reset(reader, writer):
        writer.transport.abort()
        return "close"

    async def body(client):
        # Park three idle keep-alive connections, then make every later request die after being read.
        await asyncio.gather(*(client.post("/warm", b"{}") for _ in range(3)))
        idle = client.idle_connections
        with pytest.raises(UpstreamError) as e:
            await client.post("/generate", b'{"n": 1}')
        return idle, e.value.kind

    idle, kind = _run(_serve_each([OK, OK, OK, reset], seen=seen), body)
    assert idle == 3 and kind == "unavailable"
    assert sum(1 for head in seen if b"/generate" in head) == 1


def test_reset_mid_body_is_unavailable_and_never_retried():
    seen = []

    async def half(reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"partial\":")
        await writer.drain()
        writer.transport.abort()
        return "close"

    async def body(client):
        await client.post("/warm", b"{}")
        with pytest.raises(UpstreamError) as e:
            await client.post("/generate", b"{}")
        return e.value.kind

    assert _run(_serve_each([OK, half], seen=seen), body) == "unavailable"
    assert sum(1 for head in seen if b"/generate" in head) == 1


def test_idle_connection_closed_by_server_is_retried_on_a_fresh_one():
    async def handler(reader, writer):
        await _read_request(reader)
        writer.write(OK)
        await writer.drain()
        writer.close()  # the server drops the keep-alive connection right after answering

    async def body(client):
        first = await client.post("/x", b"{}")
        await asyncio.sleep(0.05)
        second = await client.post("/x", b"{}")
        return first.body, second.body

    assert _run(handler, body) == (b"ok", b"ok")


def test_connection_is_not_reused_after_a_timeout():
    """The late answer to a timed-out request must never be read as the next request's answer."""
    release = asyncio.Event()

    async def slow(reader, writer):
        await release.wait()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nlate")
        await writer.drain()

    async def body(client):
        with pytest.raises(UpstreamError) as e:
            await client.post("/x", b"{}", timeout_s=0.05)
        release.set()
        again = await client.post("/x", b"{}")
        return e.value.kind, again.body

    assert _run(_serve_each([slow, OK]), body) == ("timeout", b"ok")


def test_connection_cap_bounds_open_connections():
    live, peak = [0], [0]
    gate = asyncio.Event()

    async def handler(reader, writer):
        live[0] += 1
        peak[0] = max(peak[0], live[0])
        try:
            while True:
                try:
                    await _read_request(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                await gate.wait()
                writer.write(OK)
                await writer.drain()
        finally:
            live[0] -= 1
            writer.close()

    async def body(client):
        calls = [asyncio.create_task(client.post("/x", b"{}")) for _ in range(6)]
        await asyncio.sleep(0.2)
        gate.set()
        return [r.body for r in await asyncio.gather(*calls)]

    assert _run(handler, body, max_connections=2) == [b"ok"] * 6
    assert peak[0] == 2


def test_any_os_error_is_an_upstream_error(monkeypatch):
    """An OSError that is not a ConnectionError (EIO here) used to escape as a raw exception."""

    async def broken_read(self, n=-1):
        raise OSError(errno.EIO, "Input/output error")

    async def body(client):
        monkeypatch.setattr(asyncio.StreamReader, "read", broken_read)
        with pytest.raises(UpstreamError) as e:
            await client.post("/x", b"{}")
        return e.value.kind

    assert _run(_serve_each([OK]), body) == "unavailable"


def test_garbage_is_a_protocol_error():
    async def body(client):
        with pytest.raises(UpstreamError) as e:
            await client.get("/x")
        return e.value.kind

    assert _run(_serve_each([b"SMTP ready\r\n\r\n"]), body) == "protocol"


def test_ipv6_host_header_is_bracketed():
    client = UpstreamClient("http://[::1]:8123", timeout_s=1, connect_timeout_s=1)
    assert client._host_header == b"[::1]:8123" and client.host == "::1"
    assert UpstreamClient("http://localhost:9", timeout_s=1, connect_timeout_s=1)._host_header == b"localhost:9"


def test_refused_connection_is_unavailable():
    async def main():
        client = UpstreamClient(f"http://127.0.0.1:{free_port()}", timeout_s=5, connect_timeout_s=1)
        await client.get("/v1/models")

    with pytest.raises(UpstreamError) as e:
        asyncio.run(main())
    assert e.value.kind == "unavailable" and "cannot connect" in str(e.value)


def test_bad_url_is_rejected():
    with pytest.raises(ValueError, match="http://HOST:PORT"):
        UpstreamClient("ftp://x", timeout_s=1, connect_timeout_s=1)


def test_module_has_no_hand_written_framing():
    assert not hasattr(up, "_read_chunked") and not hasattr(up, "_parse_head") and hasattr(up, "httptools")


def test_informational_answer_then_the_real_one():
    async def body(client):
        return await client.post("/x", b"{}")

    r = _run(_serve_each([b"HTTP/1.1 100 Continue\r\n\r\n" + OK]), body)
    assert (r.status, r.body) == (200, b"ok")


def test_stray_bytes_after_an_answer_retire_the_connection():
    # A complete answer followed by junk: the answer stands, the connection is never reused.
    connections = []

    async def body(client):
        first = await client.post("/x", b"{}")
        idle = client.idle_connections
        second = await client.post("/x", b"{}")
        return first.body, idle, second.body

    assert _run(_serve_each([OK + b"garbage\r\n\r\n", OK], connections=connections), body) == (b"ok", 0, b"ok")
    assert len(connections) == 2
