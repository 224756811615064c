"""Prometheus text-format metrics, kept per app instance (tests run several apps in one process).

A global client registry would leak counters between apps, and the proxy needs only counters,
gauges read at scrape time, and two latency histograms.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Histogram:
    __slots__ = ("buckets", "counts", "total", "n")

    def __init__(self, buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.n += 1


def _labels(pairs: tuple[tuple[str, str], ...]) -> str:
    if not pairs:
        return ""
    inner = ",".join(f'{k}="{v}"' for k, v in pairs)
    return "{" + inner + "}"


class Metrics:
    """Named counters with labels, scrape-time gauges, and histograms; `render()` gives the text format."""

    def __init__(self) -> None:
        self.counters: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(lambda: defaultdict(float))
        self.help: dict[str, str] = {}
        self.gauges: dict[str, tuple[str, Callable[[], float]]] = {}
        self.histograms: dict[str, tuple[str, Histogram]] = {}

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        self.counters[name][tuple(sorted(labels.items()))] += value

    def describe(self, name: str, text: str) -> None:
        self.help[name] = text

    def gauge(self, name: str, text: str, read: Callable[[], float]) -> None:
        self.gauges[name] = (text, read)

    def histogram(self, name: str, text: str) -> Histogram:
        h = Histogram()
        self.histograms[name] = (text, h)
        return h

    def render(self) -> str:
        out: list[str] = []
        for name in sorted(self.counters):
            out += [f"# HELP {name} {self.help.get(name, name)}", f"# TYPE {name} counter"]
            for labels, value in sorted(self.counters[name].items()):
                out.append(f"{name}{_labels(labels)} {value:g}")
        for name, (text, read) in sorted(self.gauges.items()):
            out += [f"# HELP {name} {text}", f"# TYPE {name} gauge", f"{name} {read():g}"]
        for name, (text, h) in sorted(self.histograms.items()):
            out += [f"# HELP {name} {text}", f"# TYPE {name} histogram"]
            running = 0
            for bound, count in zip(h.buckets, h.counts):
                running += count
                out.append(f'{name}_bucket{{le="{bound:g}"}} {running}')
            out.append(f'{name}_bucket{{le="+Inf"}} {h.n}')
            out += [f"{name}_sum {h.total:.6f}", f"{name}_count {h.n}"]
        return "\n".join(out) + "\n"
