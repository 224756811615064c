"""Which packed tokens count as on-policy for the mismatch metric: a sample drawn wholly from the trainer's weights."""

from __future__ import annotations

import math
from types import SimpleNamespace

from trl.experimental.async_grpo.async_grpo_trainer import DataCollatorForRollout

from fathom.rollout_worker.groups import POLICY_VERSION
from fathom.trainer.grpo import VERSION_KEY, FathomGRPOTrainer
from fathom.trl_compat.trainer import rollout_collator


def _example(ids: list[int], version: float) -> dict:
    """What TRL's rollout dataset yields for a sample the rollout loop stamped (`groups.stamp_versions`)."""
    return {"input_ids": ids, "completion_mask": [1] * len(ids), "old_log_probs": [-1.0] * len(ids), "advantage": 1.0,
            "group_id": 0, "metrics": {"reward": 1.0, POLICY_VERSION: version}}


def _on_policy(rows: list[list[dict]], trainer_version: int) -> list[list[bool]]:
    collate = rollout_collator(DataCollatorForRollout, FathomGRPOTrainer.per_token_metrics)(pad_token_id=0,
                                                                                             num_processes=len(rows))
    batch = collate([rows])
    assert all(POLICY_VERSION not in ex["metrics"] for row in rows for ex in row)  # taken out: never logged
    trainer = object.__new__(FathomGRPOTrainer)  # no model: only the bookkeeping runs
    trainer.model_version = trainer_version
    keep = batch["attention_mask"].bool()
    return [trainer._on_policy_tokens(batch[VERSION_KEY][i][keep[i]]).tolist() for i in range(len(rows))]


def test_a_sample_whose_episode_spans_a_sync_is_never_on_policy():
    row = [_example([1, 2, 3], 4.0), _example([4, 5], math.nan), _example([6, 7, 8, 9], 3.0), _example([10], 4.0)]
    (on,) = _on_policy([row], 4)
    # on-policy: drawn at 4 in one piece; mixed (3 -> 4 inside the episode) and stale (3) are not
    assert on == [True] * 3 + [False] * 2 + [False] * 4 + [True]


def test_identical_samples_of_different_versions_are_told_apart():
    """Short episodes of one group are often token for token the same; each packed sample carries its own version,
    so copies drawn at different versions count apart, across packed rows as well."""
    rows = [[_example([1, 2], 3.0), _example([1, 2], 4.0)], [_example([5, 6], 4.0)]]
    assert _on_policy(rows, 4) == [[False, False, True, True], [True, True]]


def test_a_batch_without_versions_counts_nothing_on_policy():
    trainer = object.__new__(FathomGRPOTrainer)
    trainer.model_version = 0
    assert trainer._on_policy_tokens(None) is None


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
