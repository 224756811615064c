"""/metrics speaks Prometheus text and counts what happened."""

from __future__ import annotations

import re

USER = [{"role": "user", "content": "hi"}]


def _value(text: str, line_prefix: str) -> float:
    m = re.search(rf"^{re.escape(line_prefix)} ([0-9.e+-]+)$", text, re.M)
    assert m, f"{line_prefix} not in metrics"
    return float(m.group(1))


def test_metrics_count_calls_tokens_failures_and_sessions(proxy, engine):
    sid = proxy.open(budgets={"max_calls": 2})["session_id"]
    proxy.chat(sid, USER)
    engine[0].mode = "500"
    proxy.chat(sid, USER)
    proxy.chat(sid, USER)  # refused
    proxy.http.post("/v1/chat/completions", json={"model": "policy", "messages": USER})  # no key
    r = proxy.http.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert _value(text, 'fathom_proxy_calls_total{role="root",status="ok"}') == 1
    assert _value(text, 'fathom_proxy_calls_total{role="root",status="failed"}') == 1
    assert _value(text, 'fathom_proxy_calls_total{role="root",status="refused"}') == 1
    assert _value(text, 'fathom_proxy_upstream_errors_total{kind="status"}') == 1
    assert _value(text, 'fathom_proxy_rejected_total{reason="session"}') == 1
    assert _value(text, 'fathom_proxy_tokens_total{kind="prompt"}') == 8
    assert _value(text, "fathom_proxy_sessions_open") == 1
    assert _value(text, "fathom_proxy_overhead_seconds_count") == 1
    assert _value(text, 'fathom_proxy_overhead_seconds_bucket{le="+Inf"}') == 1
    assert "# TYPE fathom_proxy_upstream_seconds histogram" in text
