"""Everything one proxy app instance holds: settings, upstream client, pinner, sessions, metrics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from fathom.capture_proxy.metrics import Histogram, Metrics
from fathom.capture_proxy.pinning import Pinner
from fathom.capture_proxy.sessions import SessionStore
from fathom.capture_proxy.upstream import UpstreamClient
from fathom.config.capture_proxy import CaptureProxyConfig


@dataclass
class ProxyState:
    cfg: CaptureProxyConfig
    upstream: UpstreamClient
    pinner: Pinner
    store: SessionStore
    metrics: Metrics = field(default_factory=Metrics)
    upstream_ok: bool | None = None
    """Whether the last upstream call got an HTTP answer (None before the first call)."""

    def __post_init__(self) -> None:
        m = self.metrics
        self.trainable_roles = {"root"} if self.cfg.trainable_roles == "root" else {"root", "subcall"}
        self.upstream_latency: Histogram = m.histogram(
            "fathom_proxy_upstream_seconds", "Time the policy server took to answer one model call")
        self.overhead: Histogram = m.histogram(
            "fathom_proxy_overhead_seconds", "Time the proxy added to one model call (total minus upstream)")
        m.counter("fathom_proxy_calls_total", "Model calls by role and outcome (ok, invalid, failed, refused)",
                  ("role", "status"))
        m.counter("fathom_proxy_tokens_total", "Tokens the policy server reported, by kind", ("kind",))
        m.counter("fathom_proxy_upstream_errors_total",
                  "Upstream failures by kind (timeout, unavailable, status, protocol)", ("kind",))
        m.counter("fathom_proxy_rejected_total", "Requests refused before any upstream call, by reason", ("reason",))
        m.counter("fathom_proxy_sessions_created_total", "Sessions opened")
        m.gauge("fathom_proxy_sessions_open", "Sessions open now", lambda: self.store.open_count)
        m.gauge("fathom_proxy_sessions_stored", "Sessions held in memory (open plus closed within the TTL)",
                lambda: len(self.store.sessions))
        m.counter_from("fathom_proxy_sessions_evicted_total", "Sessions evicted since start (closed past TTL or abandoned)",
                       lambda: self.store.evicted)
        m.gauge("fathom_proxy_merged_policy_version", "Sync count last reported by the trainer (merged sync)",
                lambda: self.pinner.merged_version)


def make_state(
    cfg: CaptureProxyConfig, *, upstream_url: str, base_model: str, weight_sync: Literal["adapter", "merged"]
) -> ProxyState:
    upstream = UpstreamClient(
        upstream_url, timeout_s=cfg.upstream_timeout_s, connect_timeout_s=cfg.upstream_connect_timeout_s
    )
    pinner = Pinner(upstream, base_model=base_model, weight_sync=weight_sync, adapter_prefix=cfg.adapter_prefix)
    store = SessionStore(closed_ttl_s=cfg.session_ttl_s, idle_ttl_s=cfg.idle_session_ttl_s)
    return ProxyState(cfg, upstream, pinner, store)
