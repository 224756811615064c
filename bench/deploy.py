"""Benchmark of the env server's container image; prints one JSON object with a `targets` list.

    .venv/bin/python bench/deploy.py [--starts 3]

Builds the image as tests/integration/test_container.py does (podman, debootstrapped Debian base; cached under
.cache/container/, so minutes the first time and seconds after), then measures:
- the image size, and the published variant's estimate: the same layers on `python:3.11-slim` instead of the
  local base (no registry is reachable here, so its size is the published figure, SLIM_BASE_MB);
- cold start: `podman run` until `GET /health` answers 200, median of --starts fresh containers;
- the demo page's first-turn latency (bench/ui_latency.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.ui_latency import measure_ui_latency
from tests import container_image as ci
from tests.ports import free_port
from fathom.unwind import sigterm_unwinds

SLIM_BASE_MB = 131.0
"""python:3.11-slim (bookworm, amd64), uncompressed as `docker images` shows it."""


def target(name: str, value: float, limit: float, unit: str) -> dict:
    return {"name": name, "value": round(value, 2), "target": f"<= {limit} {unit}", "met": bool(value <= limit)}


def cold_start_s() -> float:
    name, port = f"fathom-bench-{free_port()}", free_port()
    t0 = time.monotonic()
    ci.run_container(name, port)
    try:
        while time.monotonic() - t0 < 120:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"no /health after 120 s:\n{ci.stop_container(name)[-2000:]}")
    finally:
        ci.stop_container(name)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=3)
    a = ap.parse_args()
    if ci.missing_tools():
        sys.exit(f"bench/deploy.py needs {ci.missing_tools()} (make setup installs them)")
    built = ci.build_image()
    base_mb = int(ci.podman("image", "inspect", built["base"], "--format", "{{.Size}}").stdout.strip()) / 1e6
    image_mb = built["size_bytes"] / 1e6
    published_mb = image_mb - base_mb + SLIM_BASE_MB
    starts = [cold_start_s() for _ in range(a.starts)]
    targets = [
        target("image size, published variant (python:3.11-slim) estimate, no vLLM", published_mb / 1e3, 2.0, "GB"),
        target("container cold start to healthy (median)", statistics.median(starts), 20.0, "s"),
    ]
    targets += measure_ui_latency()  # fathom ui in chromium: the model's first answer to the first turn shown
    print(json.dumps({
        "benchmark": "deploy",
        "machine": {"cpus": os.cpu_count()},
        "image_mb": round(image_mb, 1), "local_base_mb": round(base_mb, 1), "slim_base_mb": SLIM_BASE_MB,
        "published_estimate_mb": round(published_mb, 1),
        "base_build_s": round(built["base_s"], 1), "image_build_s": round(built["build_s"], 1),
        "cold_starts_s": [round(s, 2) for s in starts],
        "targets": targets,
    }, indent=2))


if __name__ == "__main__":
    sigterm_unwinds()  # `timeout` or a job runner's SIGTERM still runs the blocks that stop servers
    main()
