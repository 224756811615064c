"""Schemathesis fuzzes the OpenAPI schemas of the capture proxy and the env server, against live servers on free
loopback ports. Every generated request, valid or not, must get an answer below 500, and the server stays healthy.

Bounded (`EXAMPLES` per operation and mode) so the module runs in well under a minute on 2 cores.
"""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from fathom.config import load_config
from fathom.env_server.server.app import create_app as create_env_app
from tests.integration.capture_proxy.servers import FakeEngine, UvicornThread, proxy_app
from tests.unit.env_server.fakes import FakePool, FakeProxy

EXAMPLES = 15


def fuzz(schema, base_url: str, headers: dict[str, str] | None = None) -> list[str]:
    """Run every operation in both generation modes; returns the requests that got a 5xx."""
    failures: list[str] = []
    for result in schema.get_all_operations():
        op = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            @given(case=op.as_strategy(generation_mode=mode))
            @settings(max_examples=EXAMPLES, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            def run(case):
                response = case.call(base_url=base_url, headers={**(case.headers or {}), **(headers or {})},
                                     timeout=30)
                if response.status_code >= 500:
                    failures.append(f"{op.label} ({mode.value}) -> {response.status_code}: "
                                    f"{case.as_curl_command()} :: {response.text[:300]}")

            try:
                run()
            except Exception as e:  # an unsatisfiable negative schema is not a server failure
                if "Unsatisfiable" not in type(e).__name__ and "Unsatisfiable" not in str(e):
                    raise
    return failures


@pytest.fixture
def live_proxy():
    engine = FakeEngine()
    with UvicornThread(engine.app) as upstream:
        app = proxy_app(upstream.url, weight_sync="merged")
        with UvicornThread(app) as server:
            yield server.url


@pytest.fixture
def live_env():
    # Every fuzzed /reset opens an HTTP episode that lives until it idles out; enough slots that none is refused.
    cfg = load_config(None, ["--env_server.max_concurrent_envs", "256", "--env_server.prompt_format", "chat",
                             "--env_server.wall_clock_s", "5"])
    pool = FakePool()
    app = create_env_app(cfg, pool_factory=lambda _: pool)
    with UvicornThread(app) as server:
        app.state.runtime.http = FakeProxy(lambda m: "```repl\nFINAL('x')\n```").client()
        yield server.url


def test_capture_proxy_schema_gets_no_5xx(live_proxy):
    sid = httpx.post(f"{live_proxy}/sessions", json={}).json()["session_id"]
    schema = schemathesis.openapi.from_url(f"{live_proxy}/openapi.json")
    # A real session key, so model calls reach validation and the (fake) engine instead of stopping at 401.
    failures = fuzz(schema, live_proxy, headers={"Authorization": f"Bearer {sid}"})
    assert not failures, "\n".join(failures)
    assert httpx.get(f"{live_proxy}/healthz").json()["status"] == "ok"


def test_env_server_schema_gets_no_5xx(live_env):
    schema = schemathesis.openapi.from_url(f"{live_env}/openapi.json")
    failures = fuzz(schema, live_env)
    assert not failures, "\n".join(failures)
    assert httpx.get(f"{live_env}/health").status_code == 200
