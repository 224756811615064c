"""Session lifecycle over HTTP: create, read, trace, close; authentication by API key."""

from __future__ import annotations

from openenv.core.harness.training import TrainingTrace

from fathom.protocol import SessionInfo

USER = [{"role": "user", "content": "hi"}]


def test_create_returns_pinned_session_info(proxy):
    info = SessionInfo.model_validate(proxy.open(metadata={"episode_id": "ep-1"}))
    assert info.session_id.startswith("fs-")
    assert info.model == "fake-base" and info.policy_version == 0
    assert info.trainable and not info.closed and info.metadata == {"episode_id": "ep-1"}
    assert proxy.http.get(f"/sessions/{info.session_id}").json()["session_id"] == info.session_id


def test_trace_is_openenv_training_trace_with_metadata(proxy):
    sid = proxy.open(metadata={"episode_id": "ep-7"})["session_id"]
    r = proxy.chat(sid, USER)
    assert r.status_code == 200
    trace = TrainingTrace.model_validate_json(proxy.http.get(f"/sessions/{sid}/trace").text)
    (turn,) = trace.turns
    assert turn.node_id == r.headers["X-Fathom-Call-Id"]
    assert turn.completion_token_ids == [100, 101, 102, 103]
    assert turn.per_token_logps == [-0.25, -0.5, -0.75, -1.0]
    assert turn.loss_mask == [0] * len(turn.prompt_token_ids) + [1] * 4
    meta = turn.metadata
    assert (meta["role"], meta["depth"], meta["parent_call_id"]) == ("root", 0, None)
    assert meta["policy_version"] == 0 and meta["finish_reason"] == "stop" and meta["episode_id"] == "ep-7"
    assert meta["valid"] is True and meta["latency_s"] >= 0


def test_session_summary_counts_tokens_and_roles(proxy):
    sid = proxy.open()["session_id"]
    proxy.chat(sid, USER)
    proxy.chat(sid, USER, headers={"X-Fathom-Role": "subcall", "X-Fathom-Depth": "1"})
    info = proxy.http.get(f"/sessions/{sid}").json()
    assert info["calls"] == 2 and info["calls_by_role"] == {"root": 1, "subcall": 1}
    assert info["prompt_tokens"] == 16 and info["completion_tokens"] == 8 and info["total_tokens"] == 24


def test_x_api_key_header_authenticates(proxy):
    sid = proxy.open()["session_id"]
    r = proxy.http.post("/v1/chat/completions", json={"model": "policy", "messages": USER}, headers={"x-api-key": sid})
    assert r.status_code == 200


def test_unknown_missing_and_closed_sessions_get_401_without_upstream_call(proxy, engine):
    fake, _ = engine
    sid = proxy.open()["session_id"]
    assert proxy.http.delete(f"/sessions/{sid}").json()["closed"] is True
    for headers in ({"Authorization": f"Bearer {sid}"}, {"Authorization": "Bearer nope"}, {}):
        r = proxy.http.post("/v1/chat/completions", json={"model": "policy", "messages": USER}, headers=headers)
        assert r.status_code == 401
        assert "POST /sessions" in r.json()["error"]["message"]
    assert fake.requests == []


def test_eval_session_has_no_training_trace_but_keeps_calls(proxy):
    sid = proxy.open(trainable=False, sampling={"temperature": 0.7, "top_p": 0.9, "top_k": 20})["session_id"]
    assert proxy.chat(sid, USER).status_code == 200
    assert proxy.http.get(f"/sessions/{sid}/trace").status_code == 409
    calls = proxy.http.get(f"/sessions/{sid}/calls").json()["calls"]
    assert calls[0]["status"] == "ok" and calls[0]["turn"]["loss_mask"].count(1) == 0


def test_trainable_session_refuses_non_policy_sampling(proxy):
    r = proxy.http.post("/sessions", json={"trainable": True, "sampling": {"top_p": 0.9, "top_k": 40}})
    assert r.status_code == 422
    assert "top_p=0.9" in r.json()["error"]["message"] and "top_k=40" in r.json()["error"]["message"]


def test_bad_session_spec_is_422_naming_the_field(proxy):
    r = proxy.http.post("/sessions", json={"budgets": {"max_calls": -1}, "bogus": 1})
    assert r.status_code == 422
    msg = r.json()["error"]["message"]
    assert "budgets.max_calls" in msg and "bogus" in msg


def test_unknown_session_reads_are_404(proxy):
    for path in ("/sessions/x", "/sessions/x/trace", "/sessions/x/calls"):
        assert proxy.http.get(path).status_code == 404
    assert proxy.http.delete("/sessions/x").status_code == 404


def test_models_and_healthz(proxy):
    assert [m["id"] for m in proxy.http.get("/v1/models").json()["data"]] == ["policy"]
    assert proxy.http.get("/healthz").json()["status"] == "ok"
