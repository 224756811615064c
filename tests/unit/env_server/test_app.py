"""The env server app in-process: OpenEnv routes (HTTP and WebSocket), the episode API and its error table.

The sandbox is the exec stand-in and the proxy is a transport-level fake; the real ones run in
tests/integration/test_env_server.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from fastapi.testclient import TestClient

from fathom.config import load_config
from fathom.env_server.server.app import create_app
from fathom.tasks import get_task, load_split, reference_solution
from tests.unit.env_server.fakes import FakePool, FakeProxy, HangsAfterFirstCall

TASK = load_split("test")[1]


@pytest.fixture
def app_client():
    def make(model=None, overrides=(), delay_s=0.0):
        cfg = load_config(None, ["--env_server.max_concurrent_envs", "4", "--env_server.prompt_format", "chat", *overrides])
        pool = FakePool()
        app = create_app(cfg, pool_factory=lambda _: pool)
        fp = FakeProxy(model or (lambda m: "```repl\nFINAL('x')\n```"), delay_s=delay_s)
        client = TestClient(app)
        client.__enter__()
        rt = app.state.runtime
        rt.http = fp.client()
        made.append(client)
        return client, fp, pool

    made: list[TestClient] = []
    yield make
    for c in made:
        c.__exit__(None, None, None)


def episode(client, body, wait=10.0):
    r = client.post("/episodes", json=body)
    assert r.status_code == 202, r.text
    return client.get(f"/episodes/{r.json()['episode_id']}", params={"wait_s": wait}).json()


def test_episode_runs_and_is_scored(app_client):
    q = get_task(TASK).question
    client, fp, pool = app_client(lambda m: f"```repl\n{reference_solution(q)}\n```")
    res = episode(client, {"task_id": TASK, "episode_id": "e1", "session_id": "s1", "proxy_url": "http://proxy"})
    assert res["status"] == "done" and res["stop_reason"] == "final" and res["episode_id"] == "e1"
    assert res["reward_components"]["correct"] and res["reward"] == res["reward_components"]["total"]
    assert res["total_tokens"] == 20 and res["session_id"] == "s1"
    assert fp.calls[0]["headers"]["authorization"] == "Bearer s1"
    assert all(ep.closed for ep in pool.episodes)


def test_episode_error_table(app_client, monkeypatch):
    client, fp, _ = app_client()
    assert client.post("/episodes", json={"task_id": "needle-1k-s1", "bogus": 1}).status_code == 422
    r = client.post("/episodes", json={"task_id": TASK, "family": "needle"})
    assert r.status_code == 422 and "not both" in r.json()["detail"]
    r = client.post("/episodes", json={"family": "nope", "seed": 1, "length": 1024})
    assert r.status_code == 404 and "nope" in r.json()["detail"]
    r = client.post("/episodes", json={"task_id": TASK, "limits": {"max_depth": 9}})
    assert r.status_code == 422 and "limits.max_depth 9" in r.json()["detail"]
    assert client.post("/episodes", json={"task_id": TASK, "episode_id": "d", "session_id": "s"}).status_code == 202
    assert client.post("/episodes", json={"task_id": TASK, "episode_id": "d", "session_id": "s"}).status_code == 409
    # a verifier that raises makes the episode unscorable, not 0
    import fathom.tasks

    monkeypatch.setattr(fathom.tasks, "score", lambda *a, **k: 1 / 0)
    res = episode(client, {"task_id": TASK, "session_id": "s2"})  # "s" is episode d's
    assert res["status"] == "error" and res["reward"] is None and "verifier failed" in res["error"]


def test_wall_clock_limit_stops_with_timeout(app_client):
    """The first model call answers; the second never does, so only the wall clock can end the
    episode, after exactly one turn, however fast or loaded the machine is."""
    client, _, _ = app_client()
    client.app.state.runtime.http = HangsAfterFirstCall(lambda m: "```repl\nprint(1)\n```").client()
    res = episode(client, {"task_id": TASK, "session_id": "s", "limits": {"wall_clock_s": 1.0, "max_turns": 8}})
    assert res["status"] == "done" and res["stop_reason"] == "timeout" and res["answer"] is None
    assert res["reward"] is not None and not res["reward_components"]["correct"]
    assert len(res["turns"]) == 1


def test_cancel_ends_a_waiting_episode_now_unscorable_and_frees_its_sandbox(app_client):
    """DELETE /episodes/{id} while the episode waits on a model call that never answers: the call is dropped,
    the episode is unscorable with stop reason `cancelled`, a waiting GET gets that answer, and the sandbox
    closes. Cancelling again, or a finished episode, changes nothing; an unknown id is a 404."""
    client, _, pool = app_client()
    never, waiting = asyncio.Event(), threading.Event()

    class NeverAnswers(FakeProxy):
        async def handle(self, request):
            if request.url.path.endswith("/chat/completions"):
                waiting.set()
                await never.wait()
            return await super().handle(request)

    client.app.state.runtime.http = NeverAnswers(lambda m: "```repl\nprint(1)\n```").client()
    r = client.post("/episodes", json={"task_id": TASK, "episode_id": "c1", "session_id": "s",
                                       "limits": {"wall_clock_s": 60.0}})
    assert r.status_code == 202, r.text
    assert waiting.wait(10.0), "the episode never called the model"
    got: dict = {}
    poller = threading.Thread(target=lambda: got.update(client.get("/episodes/c1", params={"wait_s": 30}).json()))
    poller.start()
    r = client.delete("/episodes/c1")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "error" and body["stop_reason"] == "cancelled" and body["reward"] is None
    assert "DELETE /episodes" in body["error"] and body["wall_s"] < 30
    poller.join(10.0)
    assert got["stop_reason"] == "cancelled"
    for _ in range(100):  # the harness closes the sandbox off the event loop
        if pool.episodes and pool.episodes[-1].closed:
            break
        time.sleep(0.05)
    assert pool.episodes[-1].closed
    assert client.delete("/episodes/c1").json() == body
    assert client.delete("/episodes/nosuch").status_code == 404
    client.app.state.runtime.http = FakeProxy(lambda m: "```repl\nFINAL('x')\n```").client()
    done = episode(client, {"task_id": TASK, "episode_id": "f1", "session_id": "s2"})
    assert done["status"] == "done" and client.delete("/episodes/f1").json() == done


def test_cancel_before_the_episode_first_ran_still_answers(app_client):
    """A task cancelled before its first step never runs its body; the cancel still records the result."""
    from fathom.protocol import EpisodeRequest

    client, _, _ = app_client()
    episodes = client.app.state.runtime.episodes

    async def submit_and_cancel():
        await episodes.submit(EpisodeRequest(task_id=TASK, episode_id="early", session_id="s"))
        return await episodes.cancel("early"), await episodes.get("early", wait_s=5.0)

    cancelled, polled = client.portal.call(submit_and_cancel)
    assert cancelled.status == polled.status == "error" and polled.stop_reason == "cancelled"


def test_step_mode_has_the_same_wall_clock(app_client):
    """A step that runs past env_server.wall_clock_s ends the episode with stop_reason timeout, scored."""
    client, _, pool = app_client(overrides=("--env_server.wall_clock_s", "1.0"))
    gate = threading.Event()
    assert client.post("/reset", json={"task_id": TASK, "episode_id": "w1", "max_turns": 5}).status_code == 200
    pool.episodes[-1].ns["gate"] = gate
    backstop = threading.Timer(20.0, gate.set)  # without a wall clock the step would never return
    backstop.start()
    try:
        r = client.post("/step", json={"action": {"code": "gate.wait()"}, "episode_id": "w1"})
    finally:
        gate.set()
        backstop.cancel()
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["done"] and body["observation"]["stop_reason"] == "timeout" and body["reward"] is not None
    assert "wall clock" in body["observation"]["error"] and pool.episodes[-1].closed
    r = client.post("/step", json={"action": {"code": "x = 1"}, "episode_id": "w1"})
    assert r.status_code == 409 and "timeout" in r.json()["detail"]


def test_open_session_when_none_given(app_client):
    client, fp, _ = app_client()
    res = episode(client, {"task_id": TASK, "episode_id": "auto", "sampling": {"max_tokens": 64}})
    assert res["session_id"] == "new-1" and fp.calls[0]["headers"]["x-api-key"] == "new-1"
    assert fp.opened[0]["metadata"] == {"episode_id": "auto", "task_id": TASK}
    assert fp.opened[0]["sampling"]["max_tokens"] == 64 and fp.calls[0]["body"]["max_tokens"] == 64


def test_openenv_websocket_session(app_client):
    client, fp, pool = app_client()
    q = get_task(TASK).question
    with client.websocket_connect("/ws") as ws:
        ws.send_text(json.dumps({"type": "step", "data": {"code": "x = 1"}}))
        err = json.loads(ws.receive_text())
        assert err["type"] == "error" and "reset first" in err["data"]["message"]
        ws.send_text(json.dumps({"type": "reset", "data": {"task_id": TASK, "max_turns": 3}}))
        obs = json.loads(ws.receive_text())["data"]["observation"]
        assert obs["task_id"] == TASK and obs["max_turns"] == 3 and obs["turn"] == 0
        ws.send_text(json.dumps({"type": "step", "data": {"code": "print(llm('x'))"}}))
        step = json.loads(ws.receive_text())["data"]
        assert "no capture-proxy session" in step["observation"]["output"] and not step["done"]
        ws.send_text(json.dumps({"type": "step", "data": {"code": reference_solution(q)}}))
        step = json.loads(ws.receive_text())["data"]
        assert step["done"] and step["reward"] > 0.5 and step["observation"]["final_answer"]
        ws.send_text(json.dumps({"type": "step", "data": {"code": "x = 2"}}))
        err = json.loads(ws.receive_text())
        assert err["type"] == "error" and "is done (final)" in err["data"]["message"]
        ws.send_text(json.dumps({"type": "state"}))
        state = json.loads(ws.receive_text())["data"]
        assert state["done"] and state["step_count"] == 2 and state["stop_reason"] == "final"
    assert all(ep.closed for ep in pool.episodes)


def test_http_reset_and_step_by_episode_id(app_client):
    client, _, pool = app_client()
    r = client.post("/reset", json={"task_id": TASK, "episode_id": "h1", "max_turns": 1})
    assert r.status_code == 200 and not pool.episodes[0].closed  # outlives the per-request instance
    assert client.post("/reset", json={"task_id": TASK, "bogus_field": 1}).status_code == 422
    assert client.post("/reset", json={"task_id": TASK, "episode_id": "h1"}).status_code == 409
    r = client.post("/step", json={"action": {"code": "y = 1"}, "episode_id": "nope"})
    assert r.status_code == 404
    r = client.post("/step", json={"action": {"code": ""}, "episode_id": "h1"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "code"
    r = client.post("/step", json={"action": {"code": "y = 1"}, "episode_id": "h1"}).json()
    assert r["done"] and r["observation"]["stop_reason"] == "max_turns" and r["reward"] is not None
    assert client.post("/step", json={"action": {"code": "y"}, "episode_id": "h1"}).status_code == 409
    bare = client.post("/reset", json={}).json()["observation"]
    assert bare["task_id"] == load_split("train")[0]
    schema = client.get("/schema").json()
    assert "code" in schema["action"]["properties"] and "context_chars" in schema["observation"]["properties"]
