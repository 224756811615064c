"""TRL's rollout reward function, and the log of every rollout's reward components.

- `rollout_reward` is the reward function TRL calls in the spawned rollout child: it forwards the env server's
  reward unchanged (None stays None).
- `RolloutLog`: each rollout becomes one line of `rollouts.jsonl` in the run directory, which the trainer's metrics
  callback folds into `metrics.jsonl` per step (the child has no other channel to the trainer's log). TRL hands
  its reward function an outcome that holds only the total; the components come from the episode result that
  `verify()` wrote into the rollout's own record (`record.py`), which the loop logs once the rollout returns
  (`groups.FathomRolloutLoop.after_rollout`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from fathom.rollout_worker.record import RolloutRecord
from fathom.rollout_worker.session import env_reward, episode_metrics

_lock = threading.Lock()


class RolloutLog:
    """Appends one JSON line per rollout; picklable (a path), so it crosses into the spawned child."""

    def __init__(self, path: str | Path):
        self.path = str(path)

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps({"time": time.time(), "pid": os.getpid(), **record}, default=str) + "\n"
        with _lock, open(self.path, "a") as fh:  # one write of one line: concurrent appenders never interleave
            fh.write(line)

    def failure(self, *, episode_id: str, task_id: str, group: int | None, error: str) -> None:
        """A rollout that never started (proxy or env server refused it): unscorable."""
        self.write({"episode_id": episode_id, "task_id": task_id, "group": group, "unscorable": True,
                    "status": "error", "error": error[:500], "reward": None})

    def verified(self, record: RolloutRecord) -> None:
        """A verified rollout, from its own record: its reward and every component, turns, sub-calls, stop reason.
        A rollout that failed before `verify()` has no result and writes nothing here."""
        res = record.result
        if res is None:
            return
        self.write({"episode_id": res.episode_id, "task_id": res.task_id, "session_id": res.session_id,
                    "group": res.metadata.get("group"), "reward": env_reward(res), "timed_out": record.timed_out,
                    "error": res.error, **episode_metrics(res)})


def rollout_reward(outcome: Any) -> float | None:
    """`rollout_reward_fn` for TRL: the env server's reward as `verify()` returned it (None stays None).

    TRL would use that reward without a function too, but it logs `rollout/correctness_mean` only when one is
    given."""
    return outcome.env_reward


def read_new(path: str | Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Records appended since byte `offset`, and the new offset (a partial last line waits for the next read)."""
    p = Path(path)
    if not p.exists():
        return [], offset
    with open(p, "rb") as fh:
        fh.seek(offset)
        data = fh.read()
    end = data.rfind(b"\n") + 1
    out = [json.loads(line) for line in data[:end].splitlines() if line.strip()]
    return out, offset + end


def summarize(records: list[dict[str, Any]]) -> dict[str, float]:
    """Means of reward components, turns and sub-calls over scorable rollouts, and the unscorable count."""
    out: dict[str, float] = {"rollouts/count": float(len(records)),
                             "rollouts/unscorable_total": float(sum(1 for r in records if r.get("unscorable")))}
    scorable = [r for r in records if not r.get("unscorable")]
    keys = sorted({k for r in scorable for k in r if k.startswith("reward/")})
    for k in keys:
        vals = [float(r[k]) for r in scorable if r.get(k) is not None]
        if vals:
            out[k] = sum(vals) / len(vals)
    for k in ("turns", "subcalls", "llm_calls", "total_tokens", "wall_s"):
        vals = [float(r[k]) for r in records if isinstance(r.get(k), (int, float))]
        if vals:
            out[f"episode/{k}_mean"] = sum(vals) / len(vals)
    out.update(by_family(scorable))
    return out


def by_family(scorable: list[dict[str, Any]]) -> dict[str, float]:
    """Training-time success of each family over these scorable rollouts (`train_success/<family>`, with their
    count in `train_rollouts/<family>`), and the mean context length they ran on (`train/context_chars_mean`), so a
    falling success curve can be told apart from harder tasks arriving late in the run."""
    from fathom.tasks.record import parse_id

    out: dict[str, float] = {}
    counts: dict[str, list[int]] = {}
    lengths: list[int] = []
    for r in scorable:
        try:
            family, _, length, _ = parse_id(r.get("task_id") or "")
        except KeyError:  # a task id of another shape (an imported task set): no family to file it under
            continue
        c = counts.setdefault(family, [0, 0])
        c[0] += bool(r.get("reward/correct"))
        c[1] += 1
        lengths.append(length)
    for family, (right, n) in sorted(counts.items()):
        out[f"train_success/{family}"] = right / n
        out[f"train_rollouts/{family}"] = float(n)
    if lengths:
        out["train/context_chars_mean"] = sum(lengths) / len(lengths)
    return out
