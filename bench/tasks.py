"""Task generation benchmark: time for 1M- and 10M-character tasks, and peak memory over context size.

Prints one JSON object. Times are the slowest family (median of repeats) with the haystack
corpus already cached, as it is in any process after its first task; the cold corpus load is
reported separately. Peak memory is tracemalloc's peak while generating, divided by the
context's size in bytes (contexts are ASCII: one byte per character).
"""

from __future__ import annotations

import json
import statistics
import time
import tracemalloc

from fathom.tasks import FAMILIES, generate, haystack


def _time(family: str, length: int, repeats: int) -> float:
    runs = []
    for i in range(repeats):
        t0 = time.perf_counter()
        generate(family, 100 + i, length)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def _peak_ratio(family: str, length: int) -> float:
    tracemalloc.start()
    tracemalloc.reset_peak()
    task = generate(family, 7, length)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / len(task.context.encode())


def main() -> None:
    t0 = time.perf_counter()
    corpus = haystack.corpus()
    cold = time.perf_counter() - t0
    t1m = {f: _time(f, 2**20, 5) for f in FAMILIES}
    t10m = {f: _time(f, 10 * 2**20, 3) for f in FAMILIES}
    mem = {f: _peak_ratio(f, 10 * 2**20) for f in FAMILIES}
    worst1, worst10, worstm = max(t1m.values()), max(t10m.values()), max(mem.values())
    out = {
        "bench": "tasks",
        "haystack": corpus.describe(),
        "corpus_load_s": round(cold, 4),
        "generate_1m_s": {f: round(v, 4) for f, v in t1m.items()},
        "generate_10m_s": {f: round(v, 4) for f, v in t10m.items()},
        "peak_mem_over_context_10m": {f: round(v, 3) for f, v in mem.items()},
        "targets": [
            {"name": "generate_1m_chars_s", "value": round(worst1, 4), "target": 0.5, "met": worst1 <= 0.5},
            {"name": "generate_10m_chars_s", "value": round(worst10, 4), "target": 5.0, "met": worst10 <= 5.0},
            {"name": "peak_memory_over_context_size", "value": round(worstm, 3), "target": 3.0, "met": worstm <= 3.0},
        ],
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
