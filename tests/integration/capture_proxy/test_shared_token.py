"""The shared token: the proxy and env server refuse requests without it, and refuse open binds without one."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from fathom.config import ConfigError, load_config
from fathom.config.security import SHARED_TOKEN_ENV, check_bind, is_loopback, shared_token
from fathom.entrypoints.cli import app as cli
from fathom.env_server.client import EpisodeClient
from fathom.env_server.server.app import create_app as env_app
from fathom.protocol import HEADER_SHARED_TOKEN
from fathom.rollout_worker.session import FathomSessionFactory
from tests.unit.env_server.fakes import FakePool

TOKEN = "s3cret-token-value"


@pytest.mark.parametrize("host, loop", [("127.0.0.1", True), ("127.8.0.3", True), ("::1", True), ("localhost", True),
                                        ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("node-3", False)])
def test_loopback(host, loop):
    assert is_loopback(host) is loop


def test_open_bind_needs_a_token():
    with pytest.raises(ConfigError, match=f"0.0.0.0.*env_server.host.*{SHARED_TOKEN_ENV}"):
        check_bind("0.0.0.0", None, "the env server", "env_server.host")
    check_bind("0.0.0.0", TOKEN, "the env server", "env_server.host")
    check_bind("127.0.0.1", None, "the env server", "env_server.host")


@pytest.mark.parametrize("args", [["proxy", "serve", "-c", "configs/smoke.toml", "--capture_proxy.host", "0.0.0.0"],
                                  ["env", "serve", "-c", "configs/smoke.toml", "--host", "0.0.0.0"]])
def test_serve_refuses_an_open_bind_without_a_token(monkeypatch, args):
    monkeypatch.delenv(SHARED_TOKEN_ENV, raising=False)
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2 and SHARED_TOKEN_ENV in r.output and "0.0.0.0" in r.output


def test_token_comes_from_config_or_environment(monkeypatch):
    monkeypatch.delenv(SHARED_TOKEN_ENV, raising=False)
    assert load_config(None, []).token() is None
    monkeypatch.setenv(SHARED_TOKEN_ENV, TOKEN)
    assert load_config(None, []).token() == TOKEN and shared_token() == TOKEN
    cfg = load_config(None, ["--shared_token", "other"])
    assert cfg.token() == "other" and "other" not in cfg.model_dump_json()  # the run directory gets it masked


def test_proxy_requires_the_token(make_proxy):
    proxy = make_proxy(shared_token=TOKEN)
    assert proxy.http.get("/healthz").status_code == 200  # supervisors probe without it
    r = proxy.http.post("/sessions", json={})
    assert r.status_code == 401 and HEADER_SHARED_TOKEN in r.json()["error"]["message"]
    assert proxy.http.post("/sessions", json={}, headers={HEADER_SHARED_TOKEN: "wrong"}).status_code == 401
    ok = {HEADER_SHARED_TOKEN: TOKEN}
    sid = proxy.http.post("/sessions", json={}, headers=ok).json()["session_id"]
    call = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
    # Authorization carries the session id on the proxy, so the token never travels there.
    assert proxy.http.post("/v1/chat/completions", json=call, headers={"Authorization": f"Bearer {sid}"}).status_code == 401
    r = proxy.http.post("/v1/chat/completions", json=call, headers={"Authorization": f"Bearer {sid}", **ok})
    assert r.status_code == 200, r.text
    assert proxy.state.store.get(sid) is not None


def test_env_server_requires_the_token(monkeypatch):
    monkeypatch.setenv(SHARED_TOKEN_ENV, TOKEN)
    cfg = load_config(None, ["--env_server.prompt_format", "chat"])
    with TestClient(env_app(cfg, pool_factory=lambda _: FakePool())) as c:
        assert c.get("/health").status_code == 200
        r = c.post("/episodes", json={"task_id": "nonsense"})
        assert r.status_code == 401 and "Authorization: Bearer" in r.json()["detail"]
        assert c.get("/schema").status_code == 401
        assert c.post("/episodes", json={"task_id": "nonsense"}, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 404
        assert c.post("/episodes", json={"task_id": "nonsense"}, headers={HEADER_SHARED_TOKEN: TOKEN}).status_code == 404
        with pytest.raises(Exception):
            with c.websocket_connect("/ws"):
                pass
        with c.websocket_connect("/ws", headers={HEADER_SHARED_TOKEN: TOKEN}):
            pass
        assert c.app.state.runtime.http.headers[HEADER_SHARED_TOKEN] == TOKEN  # harness -> proxy calls carry it


def test_clients_send_the_token(monkeypatch):
    monkeypatch.setenv(SHARED_TOKEN_ENV, TOKEN)
    assert EpisodeClient("http://env").http.headers[HEADER_SHARED_TOKEN] == TOKEN
    f = FathomSessionFactory(proxy_url="http://p", env_url=["http://a", "http://b"], max_tokens=8, max_turns=1)
    assert f.proxy.http.headers[HEADER_SHARED_TOKEN] == TOKEN
    assert all(c.http.headers[HEADER_SHARED_TOKEN] == TOKEN for c in f.env_clients)
    monkeypatch.delenv(SHARED_TOKEN_ENV)
    assert HEADER_SHARED_TOKEN not in EpisodeClient("http://env").http.headers
