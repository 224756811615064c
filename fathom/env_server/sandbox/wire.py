"""Length-prefixed JSON frames over a Unix socket, optionally carrying file descriptors.

JSON, not pickle: the host reads what a hostile worker writes, and unpickling would
hand the worker code execution in the host.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any

_LEN = struct.Struct(">I")
MAX_FDS = 4


class WireError(Exception):
    """The peer closed the channel, broke framing or sent an oversized frame."""


def send(sock: socket.socket, msg: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    frame = _LEN.pack(len(data)) + data
    if fds:
        # The fds ride on the first byte so the receiver gets them with the header.
        socket.send_fds(sock, [frame[:1]], fds)
        sock.sendall(frame[1:])
    else:
        sock.sendall(frame)


def _recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            # Re-armed per chunk so a peer trickling bytes cannot stretch the deadline.
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("deadline passed")
            sock.settimeout(left)
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise WireError("channel closed")
        buf += chunk
    return bytes(buf)


def recv(sock: socket.socket, max_bytes: int, want_fds: bool = False,
         deadline: float | None = None) -> tuple[dict[str, Any], list[int]]:
    """Read one frame; raises WireError on EOF, bad framing or a frame over `max_bytes`,
    and socket.timeout once `deadline` (time.monotonic) passes."""
    fds: list[int] = []
    if want_fds:
        first, fds, _flags, _addr = socket.recv_fds(sock, 1, MAX_FDS)
        if not first:
            raise WireError("channel closed")
        head = first + _recv_exact(sock, _LEN.size - 1, deadline)
    else:
        head = _recv_exact(sock, _LEN.size, deadline)
    (n,) = _LEN.unpack(head)
    if n > max_bytes:
        raise WireError(f"frame of {n} bytes exceeds the {max_bytes}-byte limit")
    try:
        msg = json.loads(_recv_exact(sock, n, deadline).decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError) as e:
        raise WireError(f"undecodable frame: {e}") from None
    if not isinstance(msg, dict):
        raise WireError("frame is not a JSON object")
    return msg, fds
