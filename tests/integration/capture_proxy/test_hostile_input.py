"""Hostile input at the proxy's control routes and session keys: clear 4xx naming the input; /healthz stays ok."""

from __future__ import annotations

import pytest

USER = [{"role": "user", "content": "hi"}]


def _healthy(proxy) -> None:
    r = proxy.http.get("/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def _message(r) -> str:
    return r.json()["error"]["message"]


def test_oversized_session_spec_is_413(proxy):
    r = proxy.http.post("/sessions", json={"metadata": {"x": "y" * (2 << 20)}})
    assert r.status_code == 413 and "cap" in _message(r)
    _healthy(proxy)


@pytest.mark.parametrize("raw", [b"{", b"nul", b"\xff\xfe", b'{"trainable": tru}'])
def test_malformed_session_spec_is_400(proxy, raw):
    r = proxy.http.post("/sessions", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in _message(r)
    _healthy(proxy)


@pytest.mark.parametrize("body, needle", [
    ({"trainable": "sometimes"}, "trainable"),
    ({"sampling": {"temperature": "hot"}}, "sampling.temperature"),
    ({"sampling": {"max_tokens": -3}}, "sampling.max_tokens"),
    ({"budgets": {"max_calls": 0}}, "budgets.max_calls"),
    ({"metadata": ["not", "a", "dict"]}, "metadata"),
    ([1, 2], "body"),
    ("text", "body"),
])
def test_wrong_types_in_session_spec_are_422(proxy, body, needle):
    r = proxy.http.post("/sessions", json=body)
    assert r.status_code == 422, r.text
    assert needle in _message(r)
    _healthy(proxy)


@pytest.mark.parametrize("method, path", [("GET", "/sessions/nope"), ("GET", "/sessions/nope/trace"),
                                          ("GET", "/sessions/nope/calls"), ("DELETE", "/sessions/nope")])
def test_unknown_session_ids_are_404(proxy, method, path):
    r = proxy.http.request(method, path)
    assert r.status_code == 404 and "'nope'" in _message(r)
    _healthy(proxy)


def test_unknown_session_key_on_a_model_call_is_401(proxy):
    r = proxy.chat("made-up", USER)
    assert r.status_code == 401 and "unknown" in _message(r) and "POST /sessions" in _message(r)
    r = proxy.http.post("/v1/chat/completions", json={"model": "policy", "messages": USER})
    assert r.status_code == 401
    _healthy(proxy)


def test_replayed_closed_session_is_refused(proxy, engine):
    sid = proxy.open()["session_id"]
    assert proxy.chat(sid, USER).status_code == 200
    assert proxy.http.delete(f"/sessions/{sid}").status_code == 200
    before = len(engine[0].requests)
    r = proxy.chat(sid, USER)
    assert r.status_code == 401 and "closed" in _message(r)
    assert len(engine[0].requests) == before  # never reaches the engine
    _healthy(proxy)


@pytest.mark.parametrize("body", [{"version": "3"}, {"version": -1}, {"version": True}, [3], {}])
def test_policy_version_wrong_types_are_400(make_proxy, body):
    proxy = make_proxy(weight_sync="merged")
    r = proxy.http.post("/policy/version", json=body)
    assert r.status_code == 400 and "non-negative integer" in _message(r)
    _healthy(proxy)


def test_tokenize_wrong_type_is_400(proxy):
    r = proxy.http.post("/tokenize", json=["a"])
    assert r.status_code == 400
    # A prompt beside a messages field that is not a chat (found by the schema fuzzer), or beside a real chat.
    for body in ({"prompt": "a", "messages": False}, {"prompt": "a", "messages": [{"role": "user", "content": "b"}]}):
        r = proxy.http.post("/tokenize", json=body)
        assert r.status_code == 400 and "exactly one of" in _message(r), body
    assert proxy.http.post("/tokenize", json={"prompt": "a", "messages": None}).status_code == 200
    _healthy(proxy)
