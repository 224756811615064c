"""/metrics speaks Prometheus text (read back with the Prometheus parser) and counts what happened."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from fathom.capture_proxy.metrics import Metrics

USER = [{"role": "user", "content": "hi"}]


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _sample(fams: dict, family: str, suffix: str = "", **labels: str) -> float:
    for s in fams[family].samples:
        if s.name == family + suffix and s.labels == labels:
            return s.value
    raise AssertionError(f"{family}{suffix}{labels} not in {[(s.name, s.labels) for s in fams[family].samples]}")


def test_metrics_count_calls_tokens_failures_and_sessions(proxy, engine):
    sid = proxy.open(budgets={"max_calls": 2})["session_id"]
    proxy.chat(sid, USER)
    engine[0].mode = "500"
    proxy.chat(sid, USER)
    proxy.chat(sid, USER)  # refused
    proxy.http.post("/v1/chat/completions", json={"model": "policy", "messages": USER})  # no key
    r = proxy.http.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    fams = _families(r.text)
    assert fams["fathom_proxy_calls"].type == "counter"
    assert _sample(fams, "fathom_proxy_calls", "_total", role="root", status="ok") == 1
    assert _sample(fams, "fathom_proxy_calls", "_total", role="root", status="failed") == 1
    assert _sample(fams, "fathom_proxy_calls", "_total", role="root", status="refused") == 1
    assert _sample(fams, "fathom_proxy_upstream_errors", "_total", kind="status") == 1
    assert _sample(fams, "fathom_proxy_rejected", "_total", reason="session") == 1
    assert _sample(fams, "fathom_proxy_tokens", "_total", kind="prompt") == 8
    assert _sample(fams, "fathom_proxy_sessions_open") == 1
    assert fams["fathom_proxy_overhead_seconds"].type == "histogram"
    assert _sample(fams, "fathom_proxy_overhead_seconds", "_count") == 1
    assert _sample(fams, "fathom_proxy_overhead_seconds", "_bucket", le="+Inf") == 1
    # Evictions only ever grow: a counter, not a gauge.
    assert fams["fathom_proxy_sessions_evicted"].type == "counter"
    assert _sample(fams, "fathom_proxy_sessions_evicted", "_total") == 0


def test_large_counters_keep_every_digit(proxy):
    # `{value:g}` printed 1234567 as 1.23457e+06, so token totals moved in steps past a million.
    proxy.state.metrics.inc("fathom_proxy_tokens_total", 1_234_567, kind="completion")
    proxy.state.metrics.inc("fathom_proxy_tokens_total", 1, kind="completion")
    fams = _families(proxy.http.get("/metrics").text)
    assert _sample(fams, "fathom_proxy_tokens", "_total", kind="completion") == 1_234_568


def test_label_values_are_escaped():
    m = Metrics()
    m.counter("x_total", "help", ("reason",))
    odd = 'say "hi"\\ and\nbye'
    m.inc("x_total", reason=odd)
    fams = _families(m.render())
    assert _sample(fams, "x", "_total", reason=odd) == 1


def test_each_app_has_its_own_registry(make_proxy):
    a, b = make_proxy(), make_proxy()
    a.state.metrics.inc("fathom_proxy_sessions_created_total")
    fa, fb = _families(a.http.get("/metrics").text), _families(b.http.get("/metrics").text)
    assert _sample(fa, "fathom_proxy_sessions_created", "_total") == 1
    assert _sample(fb, "fathom_proxy_sessions_created", "_total") == 0
