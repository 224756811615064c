"""`fathom proxy serve` starts a real proxy process from a config file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.integration.capture_proxy.servers import free_port

ROOT = Path(__file__).resolve().parents[3]


def test_proxy_serve_from_config(tmp_path, engine):
    port = free_port()
    cfg = tmp_path / "proxy.toml"
    cfg.write_text(
        f'[capture_proxy]\nport = {port}\nupstream_url = "{engine[1].url}"\n'
        '[policy_server]\nserved_model_name = "fake-base"\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "fathom.entrypoints.cli", "proxy", "serve", "--config", str(cfg),
         "--capture_proxy.default_max_calls", "3"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stdout.read().decode()
            assert time.monotonic() < deadline, "proxy did not come up"
            time.sleep(0.2)
        r = httpx.post(f"http://127.0.0.1:{port}/sessions", json={})
        assert r.status_code == 201 and r.json()["model"] == "fake-base"
        sid = r.json()["session_id"]
        for _ in range(3):
            httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", headers={"x-api-key": sid},
                       json={"model": "policy", "messages": [{"role": "user", "content": "x"}]})
        assert httpx.get(f"http://127.0.0.1:{port}/sessions/{sid}").json()["calls"] == 3
        over = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", headers={"x-api-key": sid},
                          json={"model": "policy", "messages": [{"role": "user", "content": "x"}]})
        assert over.status_code == 429  # the override reached the config
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


def test_proxy_serve_bad_config_names_the_field(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[capture_proxy]\nupstream_timeout_s = -1\n")
    out = subprocess.run([sys.executable, "-m", "fathom.entrypoints.cli", "proxy", "serve", "--config", str(cfg)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "capture_proxy.upstream_timeout_s" in out.stderr
