"""REPL output that is not valid UTF-8 (`print(chr(0xD800))`) reaches clients as an observation, with
U+FFFD in place of each bad code point: in step mode (HTTP and WebSocket) and in whole episodes.

These run the real sandbox (its worker is where such output comes from); the proxy is the fake.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from fathom.config import load_config
from fathom.env_server.sandbox import SandboxPool
from fathom.env_server.server.app import create_app
from fathom.tasks import load_split
from tests.unit.env_server.fakes import FakeProxy

TASK = load_split("test")[1]
BAD = "print('x' + chr(0xD800) + 'y')"


@pytest.fixture
def real_app():
    # Step mode with no model call: the chat path needs no tokenizer.
    cfg = load_config(None, ["--env_server.max_concurrent_envs", "2", "--env_server.prompt_format", "chat"])
    replies = iter([f"```repl\n{BAD}\n```", "```repl\nFINAL('a' + chr(0xDFFF))\n```"])
    fp = FakeProxy(lambda messages: next(replies))
    app = create_app(cfg, pool_factory=lambda c: SandboxPool(c.sandbox))
    with TestClient(app) as client:
        app.state.runtime.http = fp.client()
        yield client, fp


def test_step_mode_http_and_websocket(real_app):
    client, _ = real_app
    assert client.post("/reset", json={"task_id": TASK, "episode_id": "u1", "max_turns": 3}).status_code == 200
    r = client.post("/step", json={"action": {"code": BAD}, "episode_id": "u1"})
    assert r.status_code == 200, r.text
    assert r.json()["observation"]["output"].strip() == "x\ufffdy"
    with client.websocket_connect("/ws") as ws:
        ws.send_text(json.dumps({"type": "reset", "data": {"task_id": TASK}}))
        assert json.loads(ws.receive_text())["type"] == "observation"
        ws.send_text(json.dumps({"type": "step", "data": {"code": BAD + "\nFINAL(chr(0xDC00))"}}))
        step = json.loads(ws.receive_text())
        assert step["type"] == "observation", step
        assert step["data"]["observation"]["output"].strip() == "x\ufffdy"
        assert step["data"]["observation"]["final_answer"] == "\ufffd"


def test_whole_episode(real_app):
    client, fp = real_app
    r = client.post("/episodes", json={"task_id": TASK, "session_id": "s"})
    assert r.status_code == 202, r.text
    got = client.get(f"/episodes/{r.json()['episode_id']}", params={"wait_s": 30})
    assert got.status_code == 200, got.text
    res = got.json()
    assert res["status"] == "done" and res["answer"] == "a\ufffd", res
    assert res["turns"][0]["outputs"][0].strip() == "x\ufffdy"
    # What went back to the model as the next user message is valid too.
    assert "x\ufffdy" in fp.calls[1]["body"]["messages"][-1]["content"]
