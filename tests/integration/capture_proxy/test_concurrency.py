"""Concurrent calls on one session cannot overrun a budget; readers never see an uncaptured call."""

from __future__ import annotations

import asyncio

import httpx

USER = [{"role": "user", "content": "hi"}]


def test_concurrent_calls_respect_the_call_budget(proxy, engine):
    fake, _ = engine
    fake.delay_s = 0.05  # keep calls in flight together
    sid = proxy.open(budgets={"max_calls": 10})["session_id"]

    async def burst():
        async with httpx.AsyncClient(base_url=proxy.url, timeout=30) as c:
            rs = await asyncio.gather(*(
                c.post("/v1/chat/completions", json={"model": "policy", "messages": USER},
                       headers={"x-api-key": sid}) for _ in range(16)))
        return sorted(r.status_code for r in rs)

    assert asyncio.run(burst()) == [200] * 10 + [429] * 6
    assert len(fake.requests) == 10
    info = proxy.http.get(f"/sessions/{sid}").json()
    assert (info["calls"], info["refused"], info["completion_tokens"]) == (10, 6, 40)
    assert len(proxy.http.get(f"/sessions/{sid}/trace").json()["turns"]) == 10


def test_reads_capture_pending_calls_first(proxy):
    sid = proxy.open()["session_id"]
    r = proxy.chat(sid, USER)
    session = proxy.state.store.get(sid)
    # Re-queue the answered call as if its post-response capture had not run yet.
    record = session.records[0]
    data = r.json()
    session.pending.append((record, "chat", {"messages": USER}, data, 0.001))
    session.records[0].status = "captured"
    before = session.prompt_tokens
    info = proxy.http.get(f"/sessions/{sid}").json()
    assert info["prompt_tokens"] == before + 8 and not session.pending
