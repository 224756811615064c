"""Episodes over one and over two env servers, through the rollout worker's own session factory.

A scripted reference policy behind the real capture proxy; one env server, then a second on the same
proxy. The factory (fathom.rollout_worker.session) opens a trainable session per episode, starts it on
the env server with the fewest episodes in flight, waits, reads the trace and verifies, as TRL's worker
does. Prints one JSON object: episodes/s for one and for two env servers, each server's share, and
`targets` ({name, value, target, met}). `measure_spread()` is what bench/load.py imports.

    .venv/bin/python bench/load_spread.py [--episodes 48] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.env_server_stack import run_factory, running_stack, short_tasks
from fathom.unwind import sigterm_unwinds


def measure(episodes: int = 48, concurrency: int = 8) -> dict[str, Any]:
    tasks = short_tasks(episodes)
    with tempfile.TemporaryDirectory() as tmp, running_stack(Path(tmp)) as stack:
        run_factory(stack.proxy_url, [stack.env_url], tasks[:concurrency], concurrency)  # warm both paths
        one = run_factory(stack.proxy_url, [stack.env_url], tasks, concurrency)
        second = stack.add_env_server()
        run_factory(stack.proxy_url, [second], tasks[:concurrency], concurrency)
        two = run_factory(stack.proxy_url, [stack.env_url, second], tasks, concurrency)
    return {"one_env_server": one, "two_env_servers": two, "concurrency": concurrency}


def targets_of(m: dict[str, Any]) -> list[dict[str, Any]]:
    two = m["two_env_servers"]
    shares = [c / max(two["episodes"], 1) for c in two["per_server"]]
    return [
        {"name": "each env server gets between 40% and 60% of episodes", "value": [round(s, 3) for s in shares],
         "target": "0.40 <= share <= 0.60 for both", "met": all(0.4 <= s <= 0.6 for s in shares)},
        {"name": "no failed episodes across two env servers", "value": two["failed"], "target": 0,
         "met": two["failed"] == 0},
    ]


def measure_spread(episodes: int = 48, concurrency: int = 8) -> list[dict]:
    """The two-env-server targets: {name, value, target, met} each."""
    return targets_of(measure(episodes, concurrency))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=48)
    ap.add_argument("--concurrency", type=int, default=8)
    args = ap.parse_args()
    m = measure(args.episodes, args.concurrency)
    print(json.dumps({**m, "targets": targets_of(m)}))


if __name__ == "__main__":
    sigterm_unwinds()  # `timeout` or a job runner's SIGTERM still runs the blocks that stop servers
    main()
