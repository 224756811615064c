"""Task benchmark: generation time for 1M- and 10M-character tasks and peak memory over context size, and the
import of an external JSONL source into the task store.

Prints one JSON object. Times are the slowest family (median of repeats) with the haystack
corpus already cached, as it is in any process after its first task; the cold corpus load is
reported separately. Peak memory is tracemalloc's peak while generating, divided by the
context's size in bytes (contexts are ASCII: one byte per character).

The import row writes a JSONL source of `--import-mb` MB (about 10 rows per MB, one context of
`--largest-mb`, the rest equal), then runs `store.import_source` in a child process and reads its
peak RSS (VmHWM): rows/s, MB/s and peak RSS against 2 x the largest context + 200 MB.

    .venv/bin/python bench/tasks.py [--import-mb 1024] [--largest-mb 10] [--only import]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

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


def write_source(path: Path, total_mb: int, largest_mb: float) -> tuple[int, int]:
    """A JSONL source of about `total_mb` MB, written a row at a time; returns (rows, largest context bytes)."""
    rng = random.Random(0)
    words = [("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))))
             for _ in range(4096)]
    pool = " ".join(rng.choice(words) + ("\n" if rng.random() < 0.08 else "") for _ in range(400_000))
    largest = int(largest_mb * 2**20)
    n = max(10, total_mb * 10)
    rest = max(1024, (total_mb * 2**20 - largest) // (n - 1))
    with path.open("w") as fh:
        for i in range(n):
            size = largest if i == n // 2 else rest
            start = rng.randrange(len(pool) - 1)
            body = (pool[start:] + pool)[: size - 20] if size - 20 <= len(pool) else \
                (pool * (size // len(pool) + 2))[start:start + size - 20]
            ctx = f"row {i:07d} code {i}. " + body
            fh.write(json.dumps({"question": f"What is the code of row {i}?", "context": ctx, "answer": i}) + "\n")
    return n, largest


_CHILD = """
import json, sys, time
from fathom.config.tasks import TaskSource
from fathom.tasks import store
store.set_root(sys.argv[2])
t0 = time.monotonic()
out = store.import_source(TaskSource(name="bench", kind="jsonl", path=sys.argv[1]))
out["wall_s"] = time.monotonic() - t0
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({**out, "peak_rss_bytes": hwm * 1024}))
"""


def import_row(total_mb: int, largest_mb: float) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="fathom-bench-import-"))
    try:
        src = tmp / "source.jsonl"
        rows, largest = write_source(src, total_mb, largest_mb)
        size = src.stat().st_size
        env = os.environ | {"PYTHONPATH": str(ROOT)}
        r = subprocess.run([sys.executable, "-c", _CHILD, str(src), str(tmp / "store")], capture_output=True,
                           text=True, env=env, check=True)
        got = json.loads(r.stdout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    wall = got["wall_s"]
    budget = 2 * largest + 200 * 2**20
    mbs = size / 2**20 / wall
    return {"source_mb": round(size / 2**20, 1), "rows": rows, "largest_context_mb": round(largest / 2**20, 2),
            "wall_s": round(wall, 2), "rows_per_s": round(rows / wall, 1), "mb_per_s": round(mbs, 1),
            "peak_rss_mb": round(got["peak_rss_bytes"] / 2**20, 1), "rss_budget_mb": round(budget / 2**20, 1),
            "targets": [
                {"name": "import_mb_per_s", "value": round(mbs, 1), "target": 50.0, "met": mbs >= 50.0},
                {"name": "import_peak_rss_mb", "value": round(got["peak_rss_bytes"] / 2**20, 1),
                 "target": round(budget / 2**20, 1), "met": got["peak_rss_bytes"] <= budget},
            ]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--import-mb", type=int, default=1024, help="Size of the JSONL source the import row reads.")
    ap.add_argument("--largest-mb", type=float, default=10.0, help="Its largest context, in MB.")
    ap.add_argument("--only", choices=["all", "generate", "import"], default="all")
    a = ap.parse_args()
    out: dict = {"bench": "tasks", "targets": []}
    if a.only in ("all", "generate"):
        out |= generation()
    if a.only in ("all", "import"):
        imp = import_row(a.import_mb, a.largest_mb)
        out["targets"] += imp.pop("targets")
        out["import"] = imp
    print(json.dumps(out, indent=2))


def generation() -> dict:
    t0 = time.perf_counter()
    corpus = haystack.corpus()
    cold = time.perf_counter() - t0
    t1m = {f: _time(f, 2**20, 5) for f in FAMILIES}
    t10m = {f: _time(f, 10 * 2**20, 3) for f in FAMILIES}
    mem = {f: _peak_ratio(f, 10 * 2**20) for f in FAMILIES}
    worst1, worst10, worstm = max(t1m.values()), max(t10m.values()), max(mem.values())
    return {
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


if __name__ == "__main__":
    main()
