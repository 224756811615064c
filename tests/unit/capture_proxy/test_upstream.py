"""The pooled upstream client: keep-alive reuse, server-closed idle connections, chunked bodies, errors."""

from __future__ import annotations

import asyncio

import pytest

from fathom.capture_proxy.upstream import UpstreamClient, UpstreamError
from tests.unit.capture_proxy.servers import free_port


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


def test_chunked_body_and_keepalive_reuse():
    connections = []

    async def handler(reader, writer):
        connections.append(1)
        while True:
            try:
                await _read_request(reader)
            except asyncio.IncompleteReadError:
                break
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
            await writer.drain()
        writer.close()

    async def main():
        server, port = await _raw_server(handler)
        client = UpstreamClient(f"http://127.0.0.1:{port}", timeout_s=5, connect_timeout_s=1)
        bodies = [(await client.post("/x", b"{}")).body for _ in range(3)]
        await client.aclose()
        server.close()
        return bodies

    assert asyncio.run(main()) == [b"hello world"] * 3
    assert len(connections) == 1


def test_idle_connection_closed_by_server_is_retried_on_a_fresh_one():
    async def handler(reader, writer):
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # the server drops the keep-alive connection right after answering

    async def main():
        server, port = await _raw_server(handler)
        client = UpstreamClient(f"http://127.0.0.1:{port}", timeout_s=5, connect_timeout_s=1)
        first = await client.post("/x", b"{}")
        await asyncio.sleep(0.05)
        second = await client.post("/x", b"{}")
        await client.aclose()
        server.close()
        return first.body, second.body

    assert asyncio.run(main()) == (b"ok", b"ok")


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
