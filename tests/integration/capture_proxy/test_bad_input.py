"""Bad client input gets a clear 4xx naming the input, and never reaches the engine."""

from __future__ import annotations

import pytest

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def sid(proxy):
    return proxy.open()["session_id"]


def _post(proxy, sid, headers=None, **kw):
    return proxy.http.post("/v1/chat/completions", headers=headers or {"Authorization": f"Bearer {sid}"}, **kw)


def test_malformed_json_is_400(proxy, sid, engine):
    r = proxy.http.post("/v1/chat/completions", content=b'{"model": "policy", "messages": [',
                        headers={"Authorization": f"Bearer {sid}", "content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    assert engine[0].requests == []


def test_non_object_body_is_400(proxy, sid):
    assert _post(proxy, sid, json=[1, 2]).status_code == 400


def test_body_over_cap_is_413(make_proxy, engine):
    proxy = make_proxy(max_body_bytes=1000)
    sid = proxy.open()["session_id"]
    r = _post(proxy, sid, json={"model": "policy", "messages": [{"role": "user", "content": "x" * 5000}]})
    assert r.status_code == 413 and "max_body_bytes" in r.json()["error"]["message"]
    assert engine[0].requests == []


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_negative_max_tokens_is_400(proxy, sid, field, engine):
    r = _post(proxy, sid, json={"model": "policy", "messages": USER, field: -5})
    assert r.status_code == 400 and field in r.json()["error"]["message"]
    assert engine[0].requests == []


@pytest.mark.parametrize(
    "body, needle",
    [
        ({"model": "gpt-4", "messages": USER}, "model must be 'policy'"),
        ({"model": "policy", "messages": []}, "messages"),
        ({"model": "policy", "messages": USER, "n": 2}, "n must be 1"),
    ],
)
def test_invalid_fields_are_400(proxy, sid, body, needle):
    r = _post(proxy, sid, json=body)
    assert r.status_code == 400 and needle in r.json()["error"]["message"]


def test_bad_call_headers_are_400(proxy, sid):
    r = _post(proxy, sid, json={"model": "policy", "messages": USER}, headers={
        "Authorization": f"Bearer {sid}", "X-Fathom-Role": "boss"})
    assert r.status_code == 400 and "X-Fathom-Role" in r.json()["error"]["message"]
    r = _post(proxy, sid, json={"model": "policy", "messages": USER}, headers={
        "Authorization": f"Bearer {sid}", "X-Fathom-Depth": "-1"})
    assert r.status_code == 400 and "X-Fathom-Depth" in r.json()["error"]["message"]


def test_batched_completion_prompt_is_400(proxy, sid):
    r = proxy.http.post("/v1/completions", json={"model": "policy", "prompt": ["a", "b"]},
                        headers={"Authorization": f"Bearer {sid}"})
    assert r.status_code == 400 and "prompt" in r.json()["error"]["message"]
