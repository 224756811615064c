"""Upstream failures and broken captures, with the fake engine: 502s, invalid turns, flagged sessions."""

from __future__ import annotations

from tests.integration.capture_proxy.servers import UvicornThread

USER = [{"role": "user", "content": "hi"}]


def _calls(proxy, sid):
    return proxy.http.get(f"/sessions/{sid}/calls").json()


def test_upstream_timeout_is_502_and_recorded_failed(make_proxy, engine):
    fake, _ = engine
    proxy = make_proxy(upstream_timeout_s=0.2)
    sid = proxy.open()["session_id"]
    fake.delay_s = 1.0
    r = proxy.chat(sid, USER)
    assert r.status_code == 502
    assert "within 0.2 s" in r.json()["error"]["message"] and r.json()["error"]["code"] == "upstream_timeout"
    fake.delay_s = 0.0
    calls = _calls(proxy, sid)
    assert calls["session"]["failed"] == 1 and calls["calls"][0]["status"] == "failed"
    assert proxy.chat(sid, USER).status_code == 200  # the proxy stays up and the engine is used again


def test_upstream_500_is_502_and_recorded_failed(proxy, engine):
    fake, _ = engine
    sid = proxy.open()["session_id"]
    fake.mode = "500"
    r = proxy.chat(sid, USER)
    assert r.status_code == 502 and "HTTP 500" in r.json()["error"]["message"]
    assert "X-Fathom-Call-Id" in r.headers
    fake.mode = "ok"
    assert proxy.chat(sid, USER).status_code == 200
    info = _calls(proxy, sid)["session"]
    assert info["failed"] == 1 and info["calls"] == 2 and not info["flagged"]


def test_dropped_logprobs_mark_the_turn_invalid_and_flag_the_session(proxy, engine):
    fake, _ = engine
    sid = proxy.open()["session_id"]
    fake.mode = "nologprobs"
    r = proxy.chat(sid, USER)
    assert r.status_code == 200  # the harness still gets its answer
    calls = _calls(proxy, sid)
    assert calls["session"]["flagged"] and calls["session"]["invalid_turns"] == 1
    rec = calls["calls"][0]
    assert rec["status"] == "invalid" and "no logprobs" in rec["error"]
    assert rec["raw"]["completion_token_ids"] == [100, 101, 102, 103]  # kept, not dropped
    trace = proxy.http.get(f"/sessions/{sid}/trace")
    assert trace.status_code == 409 and rec["call_id"] in trace.json()["error"]["message"]


def test_nan_logprob_marks_the_turn_invalid(proxy, engine):
    fake, _ = engine
    sid = proxy.open()["session_id"]
    fake.mode = "nan"
    assert proxy.chat(sid, USER).status_code == 200
    calls = _calls(proxy, sid)
    assert calls["session"]["flagged"]
    assert "finite" in calls["calls"][0]["error"] and calls["calls"][0]["raw"]["per_token_logps"][1] == "nan"
    assert "finite" in calls["session"]["flag_reasons"][0]


def test_engine_restart_mid_session(engine, make_proxy):
    fake, server = engine
    proxy = make_proxy()
    sid = proxy.open()["session_id"]
    assert proxy.chat(sid, USER).status_code == 200
    server.stop()
    down = proxy.chat(sid, USER)
    assert down.status_code == 502 and down.json()["error"]["code"] == "upstream_unavailable"
    assert proxy.http.get("/healthz").json()["upstream_ok"] is False
    with UvicornThread(fake.app, port=server.port):
        again = proxy.chat(sid, USER)
        assert again.status_code == 200
        info = _calls(proxy, sid)["session"]
        assert (info["calls"], info["failed"], info["flagged"]) == (3, 1, False)
        assert len(proxy.http.get(f"/sessions/{sid}/trace").json()["turns"]) == 2
    server.start()  # so the fixture can stop it


def test_pinned_adapter_gone_after_restart_is_a_clear_502(proxy, engine):
    fake, _ = engine
    fake.adapters = ["trl-policy-v1"]
    sid = proxy.open()["session_id"]
    fake.adapters = []  # a restarted engine forgets runtime-loaded adapters
    r = proxy.chat(sid, USER)
    assert r.status_code == 502 and "trl-policy-v1" in r.json()["error"]["message"]


def test_os_error_from_the_upstream_is_a_502_and_a_failed_record(proxy, engine, monkeypatch):
    """An OSError that is not a ConnectionError used to escape as a raw 500, leaving the record pending."""
    import asyncio
    import errno

    sid = proxy.open()["session_id"]

    async def broken_read(self, n=-1):  # only the proxy's upstream client reads through StreamReader
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(asyncio.StreamReader, "read", broken_read)
    monkeypatch.setattr(asyncio.StreamReader, "readline", broken_read)
    r = proxy.chat(sid, USER)
    monkeypatch.undo()
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_unavailable"
    calls = _calls(proxy, sid)
    assert calls["calls"][0]["status"] == "failed" and "Input/output error" in calls["calls"][0]["error"]
    assert proxy.chat(sid, USER).status_code == 200
