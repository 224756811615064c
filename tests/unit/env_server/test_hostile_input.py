"""Hostile input at the env server's HTTP boundary: each gets a clear 4xx naming the input, and /health stays ok."""

from __future__ import annotations

import pytest

from tests.unit.env_server import test_app
from tests.unit.env_server.test_app import TASK, episode

app_client = test_app.app_client  # the fixture, shared with test_app

EP = "/episodes"


def _healthy(client) -> None:
    r = client.get("/health")
    assert r.status_code == 200, r.text


def _message(r) -> str:
    body = r.json()
    return body.get("message") or str(body.get("detail"))


def test_oversized_body_is_413_before_parsing(app_client):
    client, _, _ = app_client(overrides=["--env_server.max_body_bytes", "10000"])
    r = client.post(EP, content=b'{"task_id": "' + b"x" * 20000 + b'"}', headers={"content-type": "application/json"})
    assert r.status_code == 413 and "env_server.max_body_bytes" in _message(r)
    r = client.post("/step", content=b"{" + b" " * 20000 + b"}", headers={"content-type": "application/json"})
    assert r.status_code == 413
    _healthy(client)


def test_oversized_body_without_length_is_413(app_client):
    client, _, _ = app_client(overrides=["--env_server.max_body_bytes", "10000"])

    def chunks():
        for _ in range(30):
            yield b" " * 1000

    r = client.post(EP, content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    _healthy(client)


@pytest.mark.parametrize("path", [EP, "/reset", "/step"])
def test_malformed_json_is_422_naming_the_body(app_client, path):
    client, _, _ = app_client()
    r = client.post(path, content=b'{"task_id": ', headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert "JSON" in _message(r) and path in _message(r)
    _healthy(client)


@pytest.mark.parametrize("body, needle", [
    ({"task_id": 123}, "task_id"),
    ({"family": "needle", "seed": "one", "length": 4000}, "seed"),
    ({"task_id": TASK, "limits": {"max_turns": -1}}, "limits.max_turns"),
    ({"task_id": TASK, "limits": "many"}, "limits"),
    ({"task_id": TASK, "surprise": 1}, "surprise"),
    ([1, 2, 3], "body"),
])
def test_wrong_types_are_422_naming_the_field(app_client, body, needle):
    client, _, _ = app_client()
    r = client.post(EP, json=body)
    assert r.status_code == 422, r.text
    assert needle in _message(r)
    _healthy(client)


@pytest.mark.parametrize("body, status", [
    ({"task_id": "needle-4k-sabc"}, 404),
    ({"task_id": "nonsense"}, 404),
    ({"family": "nope", "seed": 1, "length": 4000}, 404),
    ({"family": "needle", "seed": 1, "length": 10**12}, 422),
])
def test_unknown_or_impossible_tasks_are_4xx(app_client, body, status):
    client, _, _ = app_client()
    r = client.post(EP, json=body)
    assert r.status_code == status, r.text
    _healthy(client)


def test_unknown_episode_id_is_404(app_client):
    client, _, _ = app_client()
    r = client.get("/episodes/never-started")
    assert r.status_code == 404 and "POST /episodes" in _message(r)
    assert client.get("/episodes/x", params={"wait_s": "soon"}).status_code == 422
    _healthy(client)


def test_replayed_episode_id_is_409(app_client):
    client, _, _ = app_client()
    episode(client, {"task_id": TASK, "episode_id": "e-replay"})
    r = client.post(EP, json={"task_id": TASK, "episode_id": "e-replay"})
    assert r.status_code == 409 and "e-replay" in _message(r)
    _healthy(client)


def test_replayed_session_id_is_409(app_client):
    """Two episodes recording into one capture session would interleave their turns into one broken trace."""
    client, _, _ = app_client()
    first = episode(client, {"task_id": TASK, "episode_id": "e-a"})
    r = client.post(EP, json={"task_id": TASK, "episode_id": "e-b", "session_id": first["session_id"]})
    assert r.status_code == 409 and first["session_id"] in _message(r) and "e-a" in _message(r)
    _healthy(client)
