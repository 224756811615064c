"""The signal-only worker drops groups whose advantages are all zero and keeps the others whole."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from trl.experimental.async_grpo.openenv_harness import HarnessRolloutWorker, _HarnessRolloutLoop

from fathom.rollout_worker.flat import SignalOnlyLoop, SignalOnlyRolloutWorker, is_flat


def _score(monkeypatch, advantages: list[float]) -> tuple[list, list]:
    samples = [SimpleNamespace(advantage=a) for a in advantages]

    async def parent_score(self, group):
        return samples

    monkeypatch.setattr(_HarnessRolloutLoop, "_score_group", parent_score)
    worker = object.__new__(SignalOnlyLoop)  # no child process: only the override runs
    pushed: list[dict] = []
    worker._push_metrics = pushed.append
    kept = asyncio.run(worker._score_group(SimpleNamespace(group_id=7)))
    return kept, pushed


def test_flat_group_is_dropped_and_counted(monkeypatch):
    kept, pushed = _score(monkeypatch, [0.0, 0.0, 0.0, 0.0])
    assert kept == []
    assert pushed == [{"rollout/flat_group_frac": (1.0, 1.0)}]


def test_group_with_signal_is_kept_whole(monkeypatch):
    # one right of four: TRL's normalised advantages; the zero-advantage case inside a group stays
    kept, pushed = _score(monkeypatch, [1.732, -0.577, -0.577, -0.577])
    assert [s.advantage for s in kept] == [1.732, -0.577, -0.577, -0.577]
    assert pushed == [{"rollout/flat_group_frac": (0.0, 1.0)}]


def test_is_flat():
    assert is_flat([0.0, 0.0])
    assert is_flat([])
    assert not is_flat([0.0, 1e-6])


def test_the_spawned_child_runs_the_filtering_loop():
    # TRL's worker is a handle; its child process builds `_loop_cls`.
    assert SignalOnlyRolloutWorker._loop_cls is SignalOnlyLoop
    assert issubclass(SignalOnlyRolloutWorker, HarnessRolloutWorker)
