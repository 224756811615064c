"""`fathom policy serve` stops the whole server process group on SIGTERM and SIGINT.

The vLLM interpreter is replaced by a fake (fault-injection style) that answers /health
and leaves a grandchild behind, so the test sees whether the group really goes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.ports import free_port

FAKE = """#!/usr/bin/env bash
sleep 300 &
echo $! > {pidfile}
{starting}exec {python} -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", {port}), H).serve_forever()
'
"""



def _gone(pid: int, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().split()[2] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.1)
    return False


def _serve_cmd(tmp_path, port: int, pidfile, starting: str) -> list[str]:
    """`fathom policy serve` on a fake vLLM (FAKE, `starting` run before it serves) and an empty model dir."""
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE.format(pidfile=pidfile, python=sys.executable, port=port, starting=starting))
    fake.chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return [sys.executable, "-m", "fathom.entrypoints.cli", "policy", "serve", "-c", "configs/smoke.toml",
            "--model.name", str(model), "--policy_server.vllm_python", str(fake),
            "--policy_server.port", str(port), "--output_dir", str(tmp_path / "runs")]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("healthy", [True, False], ids=["serving", "starting"])
def test_serve_stops_the_process_group_on_signal(tmp_path, sig, healthy):
    # "starting": the signal comes while vLLM has not answered /health yet (a launcher stopping it early).
    port, pidfile = free_port(), tmp_path / "grandchild.pid"
    cmd = _serve_cmd(tmp_path, port, pidfile, starting="" if healthy else "exec sleep 300\n")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "fake server never started"
            time.sleep(0.1)
        grandchild = int(pidfile.read_text())
        time.sleep(2.0)  # let serve reach its supervision loop
        proc.send_signal(sig)
        proc.wait(timeout=30)
        assert proc.returncode == 128 + sig
        assert _gone(grandchild), "a process of the server group outlived `fathom policy serve`"
        assert (tmp_path / "runs" / "smoke" / "config.resolved.json").is_file()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_supervisor_stopping_serve_leaves_no_vllm_that_ignores_sigterm(tmp_path):
    """`fathom launch` gives `fathom policy serve` 20 s after SIGTERM, then SIGKILLs its group. vLLM lives in a
    session of its own, so serve must have killed it by then, even when vLLM ignores SIGTERM."""
    from fathom.stack.supervisor import Supervisor

    port, pidfile, vllm_pidfile = free_port(), tmp_path / "grandchild.pid", tmp_path / "vllm.pid"
    cmd = _serve_cmd(tmp_path, port, pidfile, starting=f"trap '' TERM\necho $$ > {vllm_pidfile}\n")
    vllm = None
    try:
        with Supervisor(tmp_path / "logs") as sup:
            assert sup.stop_timeout_s == 20.0
            sup.serve("policy", cmd, f"http://127.0.0.1:{port}/health", 60)
            vllm, grandchild = int(vllm_pidfile.read_text()), int(pidfile.read_text())
        assert _gone(vllm, within=1.0), "vLLM outlived the supervisor's stop of `fathom policy serve`"
        assert _gone(grandchild, within=1.0)
    finally:
        if vllm is not None:
            try:
                os.killpg(vllm, signal.SIGKILL)  # the fake, if the check above failed
            except ProcessLookupError:
                pass
