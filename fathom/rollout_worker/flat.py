"""TRL's HarnessRolloutWorker, minus the groups that carry no gradient.

A GRPO group whose rewards are all equal (all right, all wrong, or all unscorable) gets advantage 0 on every
sample. TRL still queues those samples: the trainer spends a full forward and backward on them, and they
count in the loss's token normaliser, which shrinks the step of the groups that do carry signal. On the
embedded model about half the groups are flat (grpo-c: 7 of 12 steps had no gradient at all), and the
trainer's fwd+bwd is the slowest part of a step on 2 cores. Dropping them is DAPO's dynamic sampling.

Reward metrics are unaffected: every rollout is logged to `rollouts.jsonl` by `EnvReward` before scoring.
This subclasses TRL 1.15.0's private `_HarnessRolloutLoop` (the only TRL version `cpu_compat` accepts).
"""

from __future__ import annotations

import logging

from trl.experimental.async_grpo.openenv_harness import HarnessRolloutWorker, _HarnessRolloutLoop

log = logging.getLogger(__name__)


def is_flat(advantages: list[float]) -> bool:
    """True when no sample of a group has a non-zero advantage (TRL normalises by std + 1e-8, so equal
    rewards give exactly 0)."""
    return all(a == 0.0 for a in advantages)


class SignalOnlyLoop(_HarnessRolloutLoop):
    """The loop TRL's spawned child runs; drops every sample of a group whose advantages are all zero and
    pushes `rollout/flat_group_frac`."""

    async def _score_group(self, group):  # noqa: ANN001 - TRL's RolloutGroup
        samples = await super()._score_group(group)
        flat = is_flat([s.advantage for s in samples])
        self._push_metrics({"rollout/flat_group_frac": (1.0 if flat else 0.0, 1.0)})
        if flat:
            log.info("dropping flat group %s (%d samples, all advantages 0)", group.group_id, len(samples))
            return []
        return samples


class SignalOnlyRolloutWorker(HarnessRolloutWorker):
    """TRL's worker is a handle in the trainer process; its child builds and runs `_loop_cls`, so that is where
    the filter goes."""

    _loop_cls = SignalOnlyLoop
