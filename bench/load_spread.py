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
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fathom.rollout_worker.session import FathomSessionFactory
from fathom.tasks import load_split
from tests.integration.env_server_stack import running_stack
from fathom.unwind import sigterm_unwinds


def short_tasks(n: int, max_chars: int = 16_000) -> list[str]:
    """Test-split task ids with short contexts, repeated to `n` (the number of episodes, not of tasks)."""
    from fathom.tasks import get_task

    ids = [t for t in load_split("test") if get_task(t).metadata.length_chars <= max_chars][:16]
    return [ids[i % len(ids)] for i in range(n)]


def run_factory(proxy_url: str, env_urls: list[str], task_ids: list[str], concurrency: int) -> dict[str, Any]:
    """Every task as one rollout through the factory; wall time, per-server counts and failures."""
    factory = FathomSessionFactory(proxy_url=proxy_url, env_url=env_urls, max_tokens=256, max_turns=4,
                                   timeout_s=300.0)

    def one(i_task: tuple[int, str]) -> dict[str, Any]:
        i, task = i_task
        session = factory.create(task, seed=i, episode_id=f"spread-{len(env_urls)}-{i}-{time.time_ns():x}")
        try:
            status = session.wait_for_completion(300.0)
            trace = session.fetch_training_trace() if status == 0 else None
            verdict = session.verify([])
            return {"server": session.env_index, "status": session.result.status if session.result else "?",
                    "reward": verdict.env_reward, "turns": len(trace.turns) if trace else 0}
        finally:
            session.close()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, enumerate(task_ids)))
    wall = time.perf_counter() - t0
    counts = [sum(1 for r in results if r["server"] == k) for k in range(len(env_urls))]
    failed = [r for r in results if r["status"] != "done"]
    return {"episodes": len(results), "wall_s": round(wall, 2), "episodes_per_s": round(len(results) / wall, 3),
            "per_server": counts, "failed": len(failed), "solved": sum(1 for r in results if (r["reward"] or 0) > 0.5),
            "in_flight_left": list(factory.balancer.in_flight)}


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
