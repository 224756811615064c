"""Closed sessions are evicted after the TTL, abandoned ones after the idle TTL; memory stays bounded."""

from __future__ import annotations

import tracemalloc

from fathom.capture_proxy.sessions import SessionStore
from fathom.protocol import Budgets


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _open(store: SessionStore):
    return store.create(trainable=True, model="m", policy_version=0, sampling={}, budgets=Budgets(), metadata={})


def test_closed_session_stays_readable_until_ttl():
    clock = Clock()
    store = SessionStore(closed_ttl_s=60, idle_ttl_s=3600, clock=clock)
    s = _open(store)
    store.close(s)
    clock.t += 59
    store.sweep()
    assert store.get(s.session_id) is s
    clock.t += 2
    store.sweep()
    assert store.get(s.session_id) is None and store.evicted == 1


def test_abandoned_open_session_is_evicted():
    clock = Clock()
    store = SessionStore(closed_ttl_s=60, idle_ttl_s=100, clock=clock)
    idle, busy = _open(store), _open(store)
    clock.t += 101
    busy.last_active = clock.t
    store.sweep()
    assert store.get(idle.session_id) is None and store.get(busy.session_id) is busy


def test_memory_bounded_over_10000_sessions():
    clock = Clock()
    store = SessionStore(closed_ttl_s=5, idle_ttl_s=3600, clock=clock)
    tracemalloc.start()
    peak_after_first = None
    for i in range(10_000):
        s = _open(store)
        s.records.extend([object()] * 10)  # some per-session payload
        store.close(s)
        clock.t += 0.01
        if i == 1_000:
            peak_after_first = tracemalloc.get_traced_memory()[0]
    current = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(store.sessions) <= 501  # only those closed within the last 5 s of the fake clock
    assert store.evicted >= 9_499
    assert current < peak_after_first * 1.5


def test_http_closed_session_evicted_after_ttl(make_proxy):
    proxy = make_proxy(session_ttl_s=0)
    sid = proxy.open()["session_id"]
    assert proxy.http.delete(f"/sessions/{sid}").status_code == 200
    proxy.open()  # traffic drives eviction
    assert proxy.http.get(f"/sessions/{sid}").status_code == 404
    assert proxy.state.store.evicted == 1
