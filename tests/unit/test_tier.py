"""The unit tier's guard (tests/unit/conftest.py) is on: no process, no listening socket."""

from __future__ import annotations

import socket
import subprocess

import pytest

from tests.unit.conftest import TierError


def test_the_unit_tier_refuses_a_process_and_a_server():
    with pytest.raises(TierError, match="tests/integration"):
        subprocess.run(["true"])
    with socket.socket() as s, pytest.raises(TierError, match="listened"):
        s.listen()
