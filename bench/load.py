"""Load and faults: the scripted policy through the real proxy and env server under the launch supervisor.

64 concurrent episodes, then 256 queued at once; zero failed episodes each, episode and proxy p99 latencies,
and RSS growth of the servers (every process in their groups: the env server's sandbox zygote and workers
included). Then every fault scenario of issue 14 (`tests/integration/faults.py`), run here, each a target.

Prints one JSON object whose `targets` list holds {name, value, target, met}. Each measurement is a function
in MEASUREMENTS taking (stack, report) and returning its targets; the last spreads episodes over two env
servers (bench/load_spread.py).

  python bench/load.py [--skip-trainer]   # --skip-trainer: leave out the trainer-kill scenario (minutes)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import load_spread
from tests.integration import faults
from fathom.tasks import load_split
from fathom.unwind import sigterm_unwinds

MEMORY_GROWTH_MB = 200.0


def _target(name: str, value: Any, target: str, met: bool) -> dict[str, Any]:
    return {"name": name, "value": value, "target": target, "met": bool(met)}


def servers_rss_mb(stack: faults.ScriptedStack) -> float:
    """RSS of every live process in the servers' process groups (the supervisor makes one per server)."""
    import psutil

    groups = {c.proc.pid for c in stack.children.values()}
    total = 0
    for p in psutil.process_iter(["pid"]):
        try:
            import os

            if os.getpgid(p.pid) in groups:
                total += p.memory_info().rss
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue
    return total / 2**20


def _p(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3)


def run_wave(stack: faults.ScriptedStack, task_ids: list[str]) -> dict[str, Any]:
    """Start every episode at once (rollout worker's sessions), then collect each; latencies per episode."""
    factory = stack.factory(timeout_s=1800)
    t0 = time.monotonic()
    started = [(time.monotonic(), factory.create(tid, seed=i)) for i, tid in enumerate(task_ids)]
    walls, failed, rewards = [], 0, []
    for t_start, s in started:
        out = faults._outcome(s)
        walls.append(s.result.wall_s if s.result is not None and s.result.wall_s else time.monotonic() - t_start)
        if out["reward"] is None:
            failed += 1
        else:
            rewards.append(out["reward"])
        s.close()
    wall = time.monotonic() - t0
    return {"episodes": len(task_ids), "failed": failed, "wall_s": round(wall, 1),
            "episodes_per_s": round(len(task_ids) / wall, 2), "episode_p50_s": _p(walls, 0.5),
            "episode_p99_s": _p(walls, 0.99), "mean_reward": round(sum(rewards) / max(1, len(rewards)), 3)}


def measure_load(stack: faults.ScriptedStack, report: dict[str, Any]) -> list[dict[str, Any]]:
    ids = load_split("test")
    run_wave(stack, ids[:8])  # warm-up: imports, haystack cache
    rss0 = servers_rss_mb(stack)
    w64 = run_wave(stack, (ids * 64)[:64])
    w256 = run_wave(stack, (ids * 256)[:256])
    rss1 = servers_rss_mb(stack)
    report.update({"concurrent_64": w64, "queued_256": w256,
                   "servers_rss_mb": {"before": round(rss0, 1), "after": round(rss1, 1)}})
    growth = round(rss1 - rss0, 1)
    return [
        _target("failed_episodes_64_concurrent", w64["failed"], "== 0", w64["failed"] == 0),
        _target("failed_episodes_256_queued", w256["failed"], "== 0", w256["failed"] == 0),
        _target("servers_rss_growth_mb", growth, f"<= {MEMORY_GROWTH_MB:g}", growth <= MEMORY_GROWTH_MB),
        _target("episode_p99_s_64_concurrent", w64["episode_p99_s"], "reported", w64["episode_p99_s"] is not None),
        _target("episode_p99_s_256_queued", w256["episode_p99_s"], "reported", w256["episode_p99_s"] is not None),
    ]


def measure_faults(stack: faults.ScriptedStack, report: dict[str, Any], *, skip_trainer: bool = False,
                   tmp: Path | None = None) -> list[dict[str, Any]]:
    tmp = tmp or Path(tempfile.mkdtemp(prefix="fathom-faults-"))
    out, targets = {}, []
    for name, fn in faults.SCENARIOS.items():
        if skip_trainer and fn is faults.trainer_kill_resume:
            continue
        t0 = time.monotonic()
        try:
            res = fn(tmp / name, stack) if fn in faults.STACK_SCENARIOS else fn(tmp / name)
        except Exception as e:  # noqa: BLE001 - a scenario that crashes has failed; the others still run
            res = {"passed": False, "error": repr(e)[:300]}
        res["wall_s"] = round(time.monotonic() - t0, 1)
        out[name] = res
        targets.append(_target(f"fault/{name}", res["passed"], "passed", res["passed"]))
    report["faults"] = out
    return targets


def measure_two_env_servers(_stack: faults.ScriptedStack, report: dict[str, Any]) -> list[dict[str, Any]]:
    """Episodes spread over two env servers by load (bench/load_spread.py, on a stack of its own)."""
    m = load_spread.measure()
    report["env_servers"] = m
    return load_spread.targets_of(m)


# Each entry: (stack, report) -> targets.
MEASUREMENTS: list[Callable[..., list[dict[str, Any]]]] = [measure_load, measure_faults, measure_two_env_servers]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-trainer", action="store_true", help="leave out the trainer-kill scenario (minutes)")
    args = ap.parse_args()
    report: dict[str, Any] = {"bench": "load"}
    targets: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fathom-load-") as d, faults.scripted_stack(Path(d) / "stack") as stack:
        for m in MEASUREMENTS:
            kw = {"skip_trainer": args.skip_trainer, "tmp": Path(d) / "faults"} if m is measure_faults else {}
            targets += m(stack, report, **kw)
        report["restarts"] = stack.sup.events
    report["targets"] = targets
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    sigterm_unwinds()  # `timeout` or a job runner's SIGTERM still runs the blocks that stop servers
    main()
