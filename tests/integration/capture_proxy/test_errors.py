"""Domain errors become statuses in one table (capture_proxy/http.py); the service raises, never answers HTTP."""

from __future__ import annotations

import ast
import inspect

import orjson

from fathom.capture_proxy import calls, errors, service
from fathom.capture_proxy.http import STATUS, error_response, status_of


def test_every_domain_error_has_a_status():
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.ProxyError)]
    missing = [c.__name__ for c in classes if c is not errors.ProxyError and c not in STATUS]
    assert not missing, f"add these to http.STATUS: {missing}"


def test_upstream_client_errors_pass_through_and_subclasses_map_by_base():
    assert status_of(errors.UpstreamFailed("x")) == 502
    assert status_of(errors.UpstreamFailed("prompt too long", status=400)) == 400

    class Narrower(errors.Conflict):
        pass

    assert status_of(Narrower("x")) == 409
    assert status_of(errors.ProxyError("a bug")) == 500


def test_the_response_carries_message_code_and_headers():
    r = error_response(errors.BudgetExhausted("out of calls", headers={"X-Fathom-Call-Id": "c1"}))
    assert r.status_code == 429 and r.headers["X-Fathom-Call-Id"] == "c1"
    assert orjson.loads(r.body)["error"] == {"message": "out of calls", "type": "budget_exceeded",
                                              "code": "budget_exceeded"}


def test_the_domain_layer_speaks_no_http():
    for module in (calls, service):
        tree = ast.parse(inspect.getsource(module))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {m for m in imported if m and (m.startswith(("starlette", "fastapi")) or m.endswith(".http"))}, \
            module.__name__
