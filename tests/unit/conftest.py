"""The unit tier runs in this process: a test here that starts a process or listens on a socket fails, naming it.

Tests that need a child process or a server belong in tests/integration.
"""

from __future__ import annotations

import socket
import subprocess

import pytest


class TierError(AssertionError):
    pass


def _refuse(what: str):
    def refuse(*args, **kwargs):
        raise TierError(f"a unit test {what}; move it to tests/integration (the unit tier is in-process)")
    return refuse


@pytest.fixture(autouse=True)
def _in_process_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("started a process"))
    monkeypatch.setattr(socket.socket, "listen", _refuse("listened on a socket"))
