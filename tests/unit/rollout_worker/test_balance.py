"""Least-in-flight spreading over env servers, and the factory's failover past an unreachable one."""

from __future__ import annotations

import httpx

from fathom.rollout_worker.balance import LeastInFlight
from fathom.rollout_worker.session import FathomSessionFactory


def test_ties_rotate_and_load_wins():
    b = LeastInFlight(3)
    assert [b.acquire() for _ in range(3)] == [0, 1, 2]
    b.release(1)
    assert b.acquire() == 1  # the only one with a free slot
    b.release(0), b.release(2)
    assert b.acquire(exclude={0}) == 2
    assert b.acquire(exclude={0, 1, 2}) is None
    assert b.started == [1, 2, 2]


def test_factory_spreads_and_skips_an_unreachable_server():
    started: dict[str, int] = {}
    sid = iter(range(100))

    def proxy(req: httpx.Request) -> httpx.Response:
        if req.method == "DELETE":
            return httpx.Response(200, json={})
        return httpx.Response(201, json={"session_id": f"s{next(sid)}", "policy_version": 0, "model": "m",
                                         "trainable": True})

    def env(name: str):
        def handle(req: httpx.Request) -> httpx.Response:
            if name == "down":
                raise httpx.ConnectError("refused", request=req)
            started[name] = started.get(name, 0) + 1
            return httpx.Response(202, json={"episode_id": "e", "status": "pending"})
        return handle

    f = FathomSessionFactory(proxy_url="http://p", env_url=["http://a", "http://down", "http://b"], max_tokens=8,
                             max_turns=1)
    f.proxy.http = httpx.Client(base_url="http://p", transport=httpx.MockTransport(proxy))
    for client, name in zip(f.env_clients, ("a", "down", "b")):
        client.http = httpx.Client(base_url=f"http://{name}", transport=httpx.MockTransport(env(name)))
    sessions = [f.create("needle-1k-s1", episode_id=f"e{i}") for i in range(6)]
    assert started == {"a": 3, "b": 3}
    assert sorted(f.balancer.in_flight) == [0, 3, 3]
    for s in sessions:
        s.close()
    assert f.balancer.in_flight == [0, 0, 0]


def test_single_url_still_works():
    f = FathomSessionFactory(proxy_url="http://p", env_url="http://only/", max_tokens=8, max_turns=1)
    assert f.env_urls == ["http://only"] and f.episodes is f.env_clients[0]
