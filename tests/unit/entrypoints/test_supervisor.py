"""The main job's supervisor: health waits, a dying server ends the run loudly, and nothing is left running."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from fathom.entrypoints.supervisor import LaunchError, Supervisor
from tests.ports import free_port

# A server that answers /health and leaves a grandchild (`sleep`) in its process group.
SERVER = """
import http.server, subprocess, sys
child = subprocess.Popen(["sleep", "300"])
open(sys.argv[2], "w").write(str(child.pid))
print("server up", flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _gone(pid: int, within: float = 10.0) -> bool:
    """A killed process takes a moment to exit and be reaped; poll instead of racing it."""
    deadline = time.monotonic() + within
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _start_server(sup: Supervisor, tmp_path: Path, name: str = "policy"):
    port, pidfile = free_port(), tmp_path / f"{name}.grandchild"
    child = sup.serve(name, [sys.executable, "-c", SERVER, str(port), str(pidfile)],
                      f"http://127.0.0.1:{port}/health", timeout_s=30)
    deadline = time.monotonic() + 10
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return child, int(pidfile.read_text())


def test_servers_and_grandchildren_stop_on_exit(tmp_path: Path) -> None:
    with Supervisor(tmp_path / "logs", poll_s=0.05) as sup:
        child, grandchild = _start_server(sup, tmp_path)
        sup.run_stage("stage", [sys.executable, "-c", "print('stage ran')"])
        assert child.alive() and _alive(grandchild)
    assert _gone(child.proc.pid) and _gone(grandchild)
    assert "stage ran" in (tmp_path / "logs" / "stage.log").read_text()
    assert "server up" in (tmp_path / "logs" / "policy.log").read_text()


def test_a_server_that_dies_during_a_stage_stops_the_run_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(LaunchError) as err:
        with Supervisor(tmp_path / "logs", poll_s=0.05) as sup:
            child, grandchild = _start_server(sup, tmp_path, "proxy")
            os.kill(child.proc.pid, 9)
            sup.run_stage("grpo", [sys.executable, "-c", "import time; time.sleep(60)"])
    msg = str(err.value)
    assert msg.startswith("proxy died with code -9") and "server up" in msg
    assert _gone(grandchild)


def test_a_failed_stage_names_its_command_and_exit_code(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match=r"(?s)sft stage failed with exit code 3 .*boom"):
        with Supervisor(tmp_path / "logs", poll_s=0.05) as sup:
            sup.run_stage("sft", [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"])


def test_a_server_that_exits_before_health_is_reported(tmp_path: Path) -> None:
    with Supervisor(tmp_path / "logs", poll_s=0.05) as sup:
        with pytest.raises(LaunchError, match=r"(?s)env exited with code 1 before it was healthy.*no such model"):
            sup.serve("env", [sys.executable, "-c", "import sys; print('no such model'); sys.exit(1)"],
                      f"http://127.0.0.1:{free_port()}/health", timeout_s=30)
