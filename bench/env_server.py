"""Env server benchmark: scripted policy through the real capture proxy, env server and sandbox.

Prints one JSON object: episodes per second with 64 concurrent episodes, per-turn latency split
into server overhead (turn wall time minus the model call and the sandbox run) and sandbox
time, the OpenEnv WebSocket step latency, and the reference policy's solve rate on the test split.

    .venv/bin/python bench/env_server.py [--episodes 64] [--ws-steps 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fathom.tasks import load_split
from tests.integration.env_server_stack import run_episodes, running_stack
from fathom.unwind import sigterm_unwinds


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def turn_stats(results: list[dict]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"server_ms": [], "sandbox_ms": [], "model_ms": []}
    for r in results:
        for t in r["turns"]:
            for k in out:
                out[k].append(t[k])
    return out


def summary(xs: list[float]) -> dict[str, float]:
    return {"p50": round(pct(xs, 50), 3), "p99": round(pct(xs, 99), 3), "mean": round(statistics.fmean(xs), 3)}


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process (all its threads), from /proc."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ws_steps(env_url: str, task_id: str, n: int) -> dict[str, list[float]]:
    from fathom.env_server.client import RLMEnv
    from fathom.env_server.models import RLMAction

    lat, sandbox = [], []
    with RLMEnv(base_url=env_url).sync() as env:
        env.reset(task_id=task_id, max_turns=n + 1)
        for i in range(n):
            t0 = time.perf_counter()
            r = env.step(RLMAction(code=f"x = {i} * 2"))
            lat.append((time.perf_counter() - t0) * 1000)
            sandbox.append(r.observation.sandbox_ms)
    return {"step_ms": lat, "sandbox_ms": sandbox, "overhead_ms": [a - b for a, b in zip(lat, sandbox)]}


def ws_sessions(env_url: str, task_ids: list[str], steps: int) -> dict:
    """Many OpenEnv WebSocket sessions at once: reset, `steps` REPL steps, then the reference solution."""
    import asyncio

    from fathom.env_server.client import RLMEnv
    from fathom.env_server.models import RLMAction
    from fathom.tasks import reference_solution

    async def one(tid: str) -> tuple[bool, list[float]]:
        lat = []
        async with RLMEnv(base_url=env_url) as env:
            r = await env.reset(task_id=tid)
            for i in range(steps):
                t0 = time.perf_counter()
                await env.step(RLMAction(code=f"n{i} = len(context) + {i}"))
                lat.append((time.perf_counter() - t0) * 1000)
            r = await env.step(RLMAction(code=reference_solution(r.observation.question)))
            return bool(r.done and r.observation.reward_components and r.observation.reward_components["correct"]), lat

    async def go() -> list:
        return await asyncio.gather(*(one(t) for t in task_ids), return_exceptions=True)

    t0 = time.perf_counter()
    out = asyncio.run(go())
    wall = time.perf_counter() - t0
    ok = [o for o in out if not isinstance(o, BaseException)]
    lat = [x for _, ls in ok for x in ls]
    return {"sessions": len(task_ids), "failures": len(out) - len(ok), "solved": sum(c for c, _ in ok),
            "wall_s": round(wall, 2), "step_ms": summary(lat) if lat else None,
            "errors": sorted({repr(o)[:200] for o in out if isinstance(o, BaseException)})[:3]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=64, help="episodes submitted at once (server runs 64 at a time)")
    ap.add_argument("--ws-steps", type=int, default=200)
    args = ap.parse_args()
    test_ids = load_split("test")
    with running_stack(Path(tempfile.mkdtemp(prefix="bench_env_")), env_overrides={"max_concurrent_envs": 64, "task_cache_chars": 0}) as st:
        # Task cache off: every episode generates its task, as with distinct tasks in training.
        run_episodes(st.env_url, [{"task_id": i} for i in test_ids[:8]])  # warm-up: imports, haystack cache
        # 1) one episode at a time: the overhead without contention
        solo = []
        for tid in test_ids[:16]:
            solo += run_episodes(st.env_url, [{"task_id": tid}])
        # 2) N episodes at once
        ids = [test_ids[i % len(test_ids)] for i in range(args.episodes)]
        labels = {"scripted": "scripted upstream", "proxy": "capture proxy", "env": "env server"}
        pids = {labels[c.name]: c.proc.pid for c in st.sup.children}
        cpu0 = {k: cpu_s(v) for k, v in pids.items()}
        t0 = time.perf_counter()
        loaded = run_episodes(st.env_url, [{"task_id": i} for i in ids])
        wall = time.perf_counter() - t0
        cpu = {k: cpu_s(v) - cpu0[k] for k, v in pids.items()}
        failures = sum(1 for r in loaded if r["status"] != "done")
        # 3) the whole test split with the reference policy
        t1 = time.perf_counter()
        split = run_episodes(st.env_url, [{"task_id": i} for i in test_ids])
        split_wall = time.perf_counter() - t1
        solved = sum(1 for r in split if r["reward_components"] and r["reward_components"]["correct"]) / len(split)
        # 4) OpenEnv WebSocket steps, one client; then 64 sessions at once
        ws = ws_steps(st.env_url, test_ids[0], args.ws_steps)
        ws_load = ws_sessions(st.env_url, test_ids[:64], 4)
    solo_t, load_t = turn_stats(solo), turn_stats(loaded)
    overhead_p50 = pct(load_t["server_ms"], 50)
    out = {
        "bench": "env_server",
        "setup": "scripted reference policy -> capture proxy -> env server -> sandbox, each its own process, 2 cores",
        "concurrent_episodes": args.episodes,
        "failures": failures,
        "episodes_per_s": round(len(loaded) / wall, 2),
        "wall_s": round(wall, 2),
        "turns_per_episode": round(len(load_t["server_ms"]) / len(loaded), 2),
        "turn_latency_ms_concurrent": {k: summary(v) for k, v in load_t.items()},
        # Per episode: task generation, sandbox start, the turns and scoring, in each process.
        "cpu_ms_per_episode_concurrent": {k: round(v * 1000 / len(loaded), 2) for k, v in cpu.items()},
        "turn_latency_ms_one_at_a_time": {k: summary(v) for k, v in solo_t.items()},
        "ws_step_ms_one_client": {k: summary(v) for k, v in ws.items()},
        "ws_64_sessions": ws_load,
        "test_split": {"episodes": len(split), "solved": round(solved, 4), "wall_s": round(split_wall, 2),
                       "episodes_per_s": round(len(split) / split_wall, 2)},
        "targets": [
            {"name": "concurrent_episodes_zero_failures", "value": failures, "target": 0, "met": failures == 0
             and args.episodes >= 64},
            # Measured with 64 episodes at once; the uncontended figure is in turn_latency_ms_one_at_a_time.
            {"name": "server_overhead_per_step_p50_ms", "value": round(overhead_p50, 3), "target": 5.0,
             "met": overhead_p50 <= 5.0},
            # The reference policy is deterministic and its programs are the gold path: every task.
            {"name": "reference_policy_solves_test_split", "value": round(solved, 4), "target": 1.0,
             "met": solved == 1.0},
        ],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    sigterm_unwinds()  # `timeout` or a job runner's SIGTERM still runs the blocks that stop servers
    main()
