"""`fathom eval --start`: the one-command path the main job uses (vLLM + proxy + env server from a config)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.integration.env_server_stack import ROOT
from tests.ports import free_port


@pytest.mark.slow  # its own vLLM start-up: about two minutes on 2 cores
def test_eval_start_runs_the_whole_stack_and_stops_it(tiny_model_dir, tmp_path):
    ports = [str(free_port()) for _ in range(3)]
    r = subprocess.run(
        [sys.executable, "-m", "fathom.entrypoints.cli", "eval", "--config", "configs/eval/smoke.toml", "--start",
         "--tasks", "needle-1k-s1000010,kv_chain-1k-s1000001", "--out", str(tmp_path / "out"),
         "--model.name", str(tiny_model_dir), "--policy_server.port", ports[0], "--capture_proxy.port", ports[1],
         "--env_server.port", ports[2], "--policy_server.cpu_kvcache_gb", "1", "--trainer.max_completion_tokens", "32",
         "--env_server.max_turns", "2", "--env_server.sub_rlm_max_turns", "1", "--output_dir", str(tmp_path / "runs")],
        capture_output=True, text=True, cwd=ROOT, timeout=900, env=os.environ)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["models"]["base"]["summary"]["scorable"] == 2
    for port in ports:  # everything it started is gone: nothing listens any more
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", int(port))) != 0, f"port {port} still served"

