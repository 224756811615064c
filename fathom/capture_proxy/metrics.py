"""The proxy's Prometheus metrics, on a `prometheus_client` registry per app instance.

A registry per app, not the client library's global one: tests run several apps in one process,
and the global registry would share (and refuse to re-register) their metrics. The library does
the text format: full-precision values, escaped label values, and the counter/gauge/histogram
types as declared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _ReadCounter(Collector):
    """A counter whose total lives elsewhere (e.g. the session store's eviction count), read at scrape time."""

    def __init__(self, name: str, text: str, read: Callable[[], float]) -> None:
        self.name, self.text, self.read = name, text, read

    def collect(self) -> Iterable[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.text, value=self.read())


class Metrics:
    """Labelled counters, scrape-time gauges and counters, and histograms; `render()` gives the text format."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._counters: dict[str, Counter] = {}
        self._labels: dict[str, tuple[str, ...]] = {}

    def counter(self, name: str, text: str, labels: tuple[str, ...] = ()) -> None:
        """Declare a counter; `name` is the exposed name (ending in `_total`)."""
        base = name.removesuffix("_total")
        self._counters[name] = Counter(base, text, labelnames=labels, registry=self.registry)
        self._labels[name] = labels

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        counter = self._counters[name]
        if self._labels[name]:
            counter.labels(**labels).inc(value)
        else:
            counter.inc(value)

    def gauge(self, name: str, text: str, read: Callable[[], float]) -> None:
        Gauge(name, text, registry=self.registry).set_function(read)

    def counter_from(self, name: str, text: str, read: Callable[[], float]) -> None:
        """A monotonically growing count kept elsewhere, exposed as a counter (not a gauge)."""
        self.registry.register(_ReadCounter(name.removesuffix("_total"), text, read))

    def histogram(self, name: str, text: str) -> Histogram:
        return Histogram(name, text, buckets=LATENCY_BUCKETS, registry=self.registry)

    def render(self) -> str:
        return generate_latest(self.registry).decode("utf-8")
