"""Which packed tokens count as on-policy for the mismatch metric: a sample drawn wholly from the trainer's weights."""

from __future__ import annotations

import queue
from types import SimpleNamespace

import torch

from fathom.rollout_worker.groups import MIXED
from fathom.trainer.grpo import FathomGRPOTrainer, _VersionTap


def _sample(ids: list[int], version: int, mixed: float | None = None) -> SimpleNamespace:
    metrics = {"reward": 1.0} if mixed is None else {"reward": 1.0, MIXED: mixed}
    return SimpleNamespace(input_ids=ids, model_version=version, metrics=metrics)


def test_a_sample_whose_episode_spans_a_sync_is_never_on_policy():
    q: queue.Queue = queue.Queue()
    samples = [_sample([1, 2, 3], 4, 0.0), _sample([4, 5], 4, 1.0), _sample([6, 7, 8, 9], 3), _sample([10], 4)]
    for s in samples:
        q.put(s)
    versions: dict = {}
    tap = _VersionTap(q, versions)
    assert [tap.get() for _ in samples] == samples
    trainer = object.__new__(FathomGRPOTrainer)  # no model: only the bookkeeping runs
    trainer._sample_versions, trainer.model_version = versions, 4
    ids = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    pos = torch.tensor([0, 1, 2, 0, 1, 0, 1, 2, 3, 0])  # four packed samples
    on = trainer._on_policy_tokens(ids, pos)
    # on-policy: drawn at 4 in one piece; mixed (3 -> 4 inside the episode) and stale (3) are not
    assert on.tolist() == [True] * 3 + [False] * 2 + [False] * 4 + [True]
    assert versions == {}  # each sample's entry is used once


def test_identical_samples_of_different_versions_are_not_on_policy():
    """Short episodes of one group are often token for token the same; the packed batch cannot tell which copy is
    which, so ids shared across versions never count on-policy. Shared ids of one version all do."""
    q: queue.Queue = queue.Queue()
    samples = [_sample([1, 2], 3), _sample([1, 2], 4), _sample([5, 6], 4), _sample([5, 6], 4)]
    for s in samples:
        q.put(s)
    versions: dict = {}
    tap = _VersionTap(q, versions)
    for _ in samples:
        tap.get()
    trainer = object.__new__(FathomGRPOTrainer)
    trainer._sample_versions, trainer.model_version = versions, 4
    ids, pos = torch.tensor([1, 2, 5, 6, 1, 2, 5, 6]), torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])
    on = trainer._on_policy_tokens(ids, pos)
    assert on.tolist() == [False, False, True, True, False, False, True, True]
    assert versions == {}


def test_each_sync_starts_a_probe_whose_result_the_next_sync_logs(monkeypatch):
    from collections import defaultdict

    from trl.experimental.async_grpo import AsyncGRPOTrainer

    from fathom.trainer.weight_sync import ProbeResult

    order: list[str] = []
    monkeypatch.setattr(AsyncGRPOTrainer, "_sync_weight", lambda self: order.append("sync"))
    results = iter([None, ProbeResult(shift=0.5, noise=0.01, seconds=9.0), ProbeResult(0.25, 0.0, 1.0)])

    class Probe:
        def check(self):
            order.append("probe")
            return next(results)

    trainer = object.__new__(FathomGRPOTrainer)
    trainer.accelerator, trainer._metrics = SimpleNamespace(is_main_process=True), {"train": defaultdict(list)}
    trainer.served_probe = Probe()
    trainer._sync_weight()  # the cold sync at train begin: its probe is a baseline
    trainer._sync_weight()  # after step 1: nothing to log yet
    assert not trainer._metrics["train"]
    trainer._sync_weight()  # after step 2: logs the probe of step 1's sync, which ran in its thread meanwhile
    trainer._probe_thread.join()
    assert order == ["sync", "probe"] * 3
    got = trainer._metrics["train"]
    assert got["sync/served_logprob_shift"] == [0.5] and got["sync/served_logprob_noise"] == [0.01]
    assert got["perf/served_probe_s"] == [9.0]
