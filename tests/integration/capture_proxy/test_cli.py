"""`fathom proxy serve` starts a real proxy process from a config file."""

from __future__ import annotations

import sys

import httpx

from tests.integration.capture_proxy.servers import free_port
from tests.integration.env_server_stack import supervisor


def test_proxy_serve_from_config(tmp_path, engine):
    port = free_port()
    cfg = tmp_path / "proxy.toml"
    cfg.write_text(
        f'[capture_proxy]\nport = {port}\nupstream_url = "{engine[1].url}"\n'
        '[policy_server]\nserved_model_name = "fake-base"\n'
    )
    url = f"http://127.0.0.1:{port}"
    with supervisor(tmp_path / "logs") as sup:
        sup.serve("proxy", [sys.executable, "-m", "fathom.entrypoints.cli", "proxy", "serve", "--config", str(cfg),
                            "--capture_proxy.default_max_calls", "3"], f"{url}/healthz", 60)
        r = httpx.post(f"{url}/sessions", json={})
        assert r.status_code == 201 and r.json()["model"] == "fake-base"
        sid = r.json()["session_id"]
        for _ in range(3):
            httpx.post(f"{url}/v1/chat/completions", headers={"x-api-key": sid},
                       json={"model": "policy", "messages": [{"role": "user", "content": "x"}]})
        assert httpx.get(f"{url}/sessions/{sid}").json()["calls"] == 3
        over = httpx.post(f"{url}/v1/chat/completions", headers={"x-api-key": sid},
                          json={"model": "policy", "messages": [{"role": "user", "content": "x"}]})
        assert over.status_code == 429  # the override reached the config


def test_proxy_serve_bad_config_names_the_field(tmp_path):
    """In-process (Typer's runner): the config is refused before anything starts."""
    from typer.testing import CliRunner

    from fathom.entrypoints.cli import app

    cfg = tmp_path / "bad.toml"
    cfg.write_text("[capture_proxy]\nupstream_timeout_s = -1\n")
    out = CliRunner().invoke(app, ["proxy", "serve", "--config", str(cfg)])
    assert out.exit_code != 0 and "capture_proxy.upstream_timeout_s" in out.stderr, out.output
