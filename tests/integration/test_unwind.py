"""SIGTERM (from `timeout`, CI or a job runner) mid-run leaves no process behind: a benchmark, and a pytest fixture.

Servers start in sessions of their own, so only the code that started them can stop them; with Python's default
SIGTERM that code never runs (fathom/unwind.py). Each test snapshots every descendant of the process it kills,
then checks that none of them outlives it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Callable

from tests.procs import alive, cmdline, descendants

ROOT = Path(__file__).resolve().parents[2]


def _terminate_mid_run(argv: list[str], ready: Callable[[set[int]], bool], log: Path, timeout_s: float = 180) -> None:
    with open(log, "wb") as fh:
        p = subprocess.Popen(argv, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                             env=os.environ | {"PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"})
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and p.poll() is None:
            seen |= descendants(p.pid)
            if ready(seen):
                break
            time.sleep(0.3)
        assert p.poll() is None and ready(seen), f"never got ready:\n{log.read_text()[-3000:]}"
        time.sleep(2)
        seen |= descendants(p.pid)
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=90)
        time.sleep(1)
        left = {pid: cmdline(pid) for pid in seen if alive(pid)}
        assert not left, f"still running after SIGTERM of {argv[1:3]}: {left}\n{log.read_text()[-2000:]}"
    finally:
        for pid in [p.pid, *seen]:
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        p.wait(timeout=30)


def _serving(seen: set[int]) -> bool:
    cmds = [cmdline(pid) for pid in seen]
    return any("proxy serve" in c for c in cmds) and any("env serve" in c for c in cmds)


def test_a_benchmark_stopped_by_sigterm_stops_its_servers(tmp_path):
    argv = [sys.executable, "bench/env_server.py", "--episodes", "64", "--ws-steps", "200"]
    _terminate_mid_run(argv, _serving, tmp_path / "bench.log")


def test_a_pytest_run_stopped_by_sigterm_tears_its_fixtures_down(tmp_path):
    (tmp_path / "test_held.py").write_text(textwrap.dedent("""
        import time
        import pytest
        from tests.integration.env_server_stack import running_stack

        @pytest.fixture(scope="module")
        def stack(tmp_path_factory):
            with running_stack(tmp_path_factory.mktemp("stack")) as st:
                yield st

        def test_held(stack):
            time.sleep(600)
    """))
    # `-p tests.conftest` loads the project's conftest (its SIGTERM hook) for a test file outside tests/.
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
            str(tmp_path / "test_held.py")]
    _terminate_mid_run(argv, _serving, tmp_path / "pytest.log")
