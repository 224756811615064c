"""Fixtures: a fake engine and a proxy in front of it, both real uvicorn servers on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.capture_proxy.servers import FakeEngine, UvicornThread, proxy_app


@pytest.fixture
def engine() -> Iterator[tuple[FakeEngine, UvicornThread]]:
    fake = FakeEngine()
    with UvicornThread(fake.app) as server:
        yield fake, server


class Proxy:
    def __init__(self, server: UvicornThread, app: Any) -> None:
        self.server, self.app = server, app
        self.http = httpx.Client(base_url=server.url, timeout=30)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def state(self):
        return self.app.state.proxy

    def open(self, **spec: Any) -> dict[str, Any]:
        r = self.http.post("/sessions", json=spec)
        assert r.status_code == 201, r.text
        return r.json()

    def chat(self, sid: str, messages: list[dict[str, str]], headers: dict[str, str] | None = None, **body: Any):
        payload = {"model": "policy", "messages": messages, **body}
        return self.http.post("/v1/chat/completions", json=payload,
                              headers={"Authorization": f"Bearer {sid}", **(headers or {})})


@pytest.fixture
def make_proxy(engine):
    """Build a proxy in front of the fake engine with config overrides; stopped after the test."""
    started: list[Proxy] = []

    def make(**cfg: Any) -> Proxy:
        weight_sync = cfg.pop("weight_sync", "adapter")
        app = proxy_app(engine[1].url, weight_sync=weight_sync, **cfg)
        proxy = Proxy(UvicornThread(app).start(), app)
        started.append(proxy)
        return proxy

    yield make
    for p in started:
        p.http.close()
        p.server.request_stop()
    engine[1].request_stop()  # the engine fixture's own stop then only waits: all of them shut down side by side
    for p in started:
        p.server.stop()


@pytest.fixture
def proxy(make_proxy) -> Proxy:
    return make_proxy()
