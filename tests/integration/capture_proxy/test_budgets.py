"""Per-session budgets: calls, tokens, depth. Over budget is 429, recorded as refused, never forwarded."""

from __future__ import annotations

USER = [{"role": "user", "content": "hi"}]  # 8 prompt + 4 completion tokens from the fake


def test_call_budget(proxy, engine):
    sid = proxy.open(budgets={"max_calls": 2})["session_id"]
    assert [proxy.chat(sid, USER).status_code for _ in range(2)] == [200, 200]
    r = proxy.chat(sid, USER)
    assert r.status_code == 429 and "max_calls" in r.json()["error"]["message"]
    assert len(engine[0].requests) == 2
    calls = proxy.http.get(f"/sessions/{sid}/calls").json()
    assert calls["session"]["refused"] == 1 and calls["calls"][-1]["status"] == "refused"


def test_token_budget(proxy, engine):
    sid = proxy.open(budgets={"max_tokens": 20})["session_id"]
    assert proxy.chat(sid, USER).status_code == 200  # 12 tokens used
    assert proxy.chat(sid, USER).status_code == 200  # 24 used: the call was allowed at 12 < 20
    r = proxy.chat(sid, USER)
    assert r.status_code == 429 and "max_tokens" in r.json()["error"]["message"]
    assert len(engine[0].requests) == 2


def test_depth_budget(proxy, engine):
    sid = proxy.open(budgets={"max_depth": 1})["session_id"]
    ok = proxy.chat(sid, USER, headers={"X-Fathom-Role": "subcall", "X-Fathom-Depth": "1"})
    deep = proxy.chat(sid, USER, headers={"X-Fathom-Role": "subcall", "X-Fathom-Depth": "2"})
    assert ok.status_code == 200 and deep.status_code == 429
    assert "depth 2" in deep.json()["error"]["message"]
    assert len(engine[0].requests) == 1


def test_config_default_budgets_apply(make_proxy):
    proxy = make_proxy(default_max_calls=1)
    sid = proxy.open()["session_id"]
    assert proxy.chat(sid, USER).status_code == 200
    assert proxy.chat(sid, USER).status_code == 429
