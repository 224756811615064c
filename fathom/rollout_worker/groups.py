"""What TRL's rollout child does with a scored group before the trainer sees it: each sample's policy version, and
two optional changes.

- Policy version: TRL stamps every sample with the version current when its group was formed. Under merged sync the
  weights change under a running episode, so the loop restamps each sample with the oldest version that sampled
  any of its trained turns (the capture proxy records a version when each call is sent and when it is answered),
  and marks a sample whose turns span a sync `sample/policy_versions_mixed` = 1. The versions ride in the rollout's
  own record (`record.py`): the session writes them there when it fetches the trace, and every training row of the
  rollout carries the record to scoring. Each sample then carries `sample/policy_version` (NaN when mixed), which
  the trainer turns into a per-token tensor (`trainer/grpo.py`): it never counts a mixed sample on-policy, and TRL's
  staleness is measured from the sample's oldest tokens.
- Episodes: the record also carries its episode id (written when the session is created), and that id is what
  groups one conversation's training rows (several when it forked) in the metrics and `balance_lengths` below.

- `drop_flat_groups`: a group whose rewards are all equal (all right, all wrong, or all unscorable) gets
  advantage 0 on every sample. TRL still queues those samples: the trainer spends a full forward and backward on
  them, and they count in the loss's token normaliser, which shrinks the step of the groups that do carry
  signal. Dropping them is DAPO's dynamic sampling. `rollout/flat_group_frac` counts them.
- `balance_lengths`: TRL's loss sums advantage x ratio over every trained token and divides by the batch's token
  count, so an episode weighs in proportion to its length. On the embedded model a wrong episode runs to the turn
  limit (three programs of up to 400 tokens, often the same one repeated) while a right one stops after one, so in
  a group with one right answer of four the wrong episodes push the shared program template down about three
  times harder than the right one pushes it up. Scaling each episode's advantage by (the group's mean trained
  tokens / its own) gives every episode the same total weight, as sequence-mean GRPO does, and keeps the loss's
  overall scale. `rollout/length_balance_max_scale` logs the largest factor applied in a group.

- Group metrics, pushed for every scored group before the switches act (so dropped groups count too):
  `rollout/group_reward_std`, the spread of the group's scorable rewards (0 for a flat group), and
  `rollout/sampled_nll`, the mean negative logprob of the tokens the group sampled and would train on. vLLM
  returns processed logprobs (after temperature), so the latter estimates the per-token entropy of the sampling
  policy at the training temperature over every group, where TRL's `entropy` covers only the trained batch.

Reward metrics are unaffected: every verified rollout is logged to `rollouts.jsonl` from its own record as soon as it
returns (`after_rollout`), before its group is scored.
The loop builds on `trl_compat.rollout.HarnessLoop`, TRL's loop-owning rollout loop behind public hooks; TRL
forwards the worker's constructor keywords to the loop, which is how the two switches reach the child
(and `cpu_cores`, the cores the child runs on, away from the trainer's).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Sequence
from typing import Any

from fathom.rollout_worker.record import RolloutRecord
from fathom.rollout_worker.rewards import RolloutLog
from fathom.trl_compat.rollout import HarnessLoop, HarnessWorker

log = logging.getLogger(__name__)

MIXED = "sample/policy_versions_mixed"
"""Per-sample metric: 1.0 when the sample's trained turns came from more than one weights version."""

POLICY_VERSION = "sample/policy_version"
"""Per-sample value for the trainer: the one policy version that sampled every trained turn, NaN when mixed. The
trainer takes it out of the metrics before they are logged (`trainer/grpo.py`)."""


def stamp_versions(samples: Sequence[Any], records: Sequence[Any]) -> None:
    """Give each sample the oldest policy version of its rollout's trained turns, the MIXED flag and
    POLICY_VERSION, from `records` (each sample's `RolloutRecord`, or None). A sample whose rollout recorded no
    versions keeps TRL's group version, and no MIXED flag."""
    for s, record in zip(samples, records, strict=True):
        span = record.policy_versions if isinstance(record, RolloutRecord) else None
        if span is not None:
            s.model_version = span[0]
            s.metrics[MIXED] = float(span[0] != span[1])
        s.metrics[POLICY_VERSION] = float(s.model_version) if not s.metrics.get(MIXED) else math.nan


def is_flat(advantages: list[float]) -> bool:
    """True when no sample of a group has a non-zero advantage (TRL normalises by std + 1e-8, so equal
    rewards give exactly 0)."""
    return all(a == 0.0 for a in advantages)


def episode_keys(records: Sequence[Any]) -> list[str]:
    """The episode each sample came from, by the id its rollout's record carries: the key that groups one
    conversation's training rows (a forked conversation makes several). The session writes the id into the record
    when it is created (`session.py`), and every training row of the rollout carries the record."""
    keys = []
    for record in records:
        if not isinstance(record, RolloutRecord) or record.episode_id is None:
            raise RuntimeError(f"a scored sample carries {record!r}, not the RolloutRecord of an episode: every "
                               "training row must carry its rollout's record (FathomRolloutLoop.task_for)")
        keys.append(record.episode_id)
    return keys


def group_metrics(samples: Sequence[Any], keys: Sequence[str]) -> dict[str, Any]:
    """The group's reward spread and sampled-token NLL (module docstring). Rows of one conversation (one key of
    `keys`, each sample's episode) share its reward, so the spread is over conversations; NaN rewards are
    unscorable and left out. The NLL is a (sum, tokens) pair, which TRL's logger reduces as a rate over the
    logging window."""
    rewards: dict[str, float] = {}
    nll, tokens = 0.0, 0
    for s, key in zip(samples, keys, strict=True):
        r = s.metrics.get("reward")
        if r is not None and not math.isnan(r):
            rewards[key] = float(r)
        for m, lp in zip(s.completion_mask, s.old_log_probs):
            if m:
                nll -= lp
                tokens += 1
    out: dict[str, Any] = {}
    if rewards:
        vals = list(rewards.values())
        mean = sum(vals) / len(vals)
        out["rollout/group_reward_std"] = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
    if tokens:
        out["rollout/sampled_nll"] = (nll, float(tokens))
    return out


def length_balance(samples: Sequence[Any], keys: Sequence[str]) -> float:
    """Scale each episode's advantage in place by mean(trained tokens per episode) / its own trained tokens.

    `keys` names each sample's episode (`episode_keys`): a conversation that forked into several training rows
    counts their tokens together. Episodes with no trained token are left alone. Returns the largest factor
    applied (1.0 when nothing changed)."""
    tokens: dict[str, int] = {}
    for s, key in zip(samples, keys, strict=True):
        tokens[key] = tokens.get(key, 0) + sum(s.completion_mask)
    counted = [n for n in tokens.values() if n > 0]
    if len(counted) < 2:
        return 1.0
    mean = sum(counted) / len(counted)
    largest = 1.0
    for s, key in zip(samples, keys, strict=True):
        n = tokens[key]
        if n > 0:
            factor = mean / n
            s.advantage *= factor
            largest = max(largest, factor)
    return largest


def pin_process(cores: list[int]) -> None:
    """Move every thread of this process onto `cores`. The child is spawned by the trainer and inherits its pinned
    core; its HTTP, JSON and scoring work would then take turns with the trainer's forward and backward."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cores)
        except OSError as e:
            log.warning("rollout child: could not move thread %d to cores %s (%s)", tid, cores, e.strerror)


class FathomRolloutLoop(HarnessLoop):
    """The loop TRL's spawned child runs, with the two group switches of the module docstring (both off: TRL's own
    behaviour). `rollout_log`: where each verified rollout's reward components go (None: nowhere)."""

    def __init__(self, *, drop_flat_groups: bool = False, balance_lengths: bool = False,
                 cpu_cores: list[int] | None = None, rollout_log: RolloutLog | None = None, **loop_kwargs: Any):
        if cpu_cores:
            pin_process(cpu_cores)
        self.drop_flat_groups = drop_flat_groups
        self.balance_lengths = balance_lengths
        self.rollout_log = rollout_log
        super().__init__(**loop_kwargs)

    def run(self) -> None:
        """TRL's loop; once it has ended, the child lets go of the samples and metrics no one will read.

        When the trainer stops the child it no longer reads the sample and metric queues. Their feeder threads
        then block on full pipes, and at exit the child joins them, until TRL terminates it after 15 s (measured:
        every GRPO stage of `make demo` ended so). Items already in the pipes stay there; the ones still buffered
        in the child are dropped, which is what a stop means. The exception queue keeps its join, so a failure
        still reaches the trainer."""
        try:
            super().run()
        finally:
            self.release_queues()

    def task_for(self, prompt: Any) -> RolloutRecord:
        """Each rollout's own record: the session factory takes the prompt from it, and the session fills in its
        episode id, policy versions and verified result."""
        return RolloutRecord(prompt)

    def after_rollout(self, task: Any, rollout: tuple) -> None:
        """Log the rollout from its record, where `verify()` left the episode result."""
        if self.rollout_log is not None and isinstance(task, RolloutRecord):
            self.rollout_log.verified(task)

    def after_scoring(self, group: Any, samples: list[Any], tasks: list[Any]) -> list[Any]:
        stamp_versions(samples, tasks)
        keys = episode_keys(tasks)
        flat = is_flat([s.advantage for s in samples])
        self.push_metrics({"rollout/flat_group_frac": (1.0 if flat else 0.0, 1.0), **group_metrics(samples, keys)})
        if flat and self.drop_flat_groups:
            log.info("dropping flat group %s (%d samples, all advantages 0)", group.group_id, len(samples))
            return []
        if self.balance_lengths and not flat:
            self.push_metrics({"rollout/length_balance_max_scale": length_balance(samples, keys)})
        return samples


class FathomRolloutWorker(HarnessWorker):
    """TRL's worker is a handle in the trainer process; its child builds and runs `loop_cls` with the worker's
    keywords, so that is where the group switches go."""

    loop_cls = FathomRolloutLoop
    stop_s: float | None = None
    """How long the last `stop()` took."""
    exitcode: int | None = None
    """The child's exit code after `stop()`: 0 when it exited by itself, -15 when TRL had to terminate it."""

    def stop(self) -> None:
        """TRL's stop, timed. The child closes its live sessions, which cancels their episodes
        (`FathomSession.close`), and stops joining its queues (`FathomRolloutLoop.run`), so it exits on its own
        instead of at TRL's 15 s terminate."""
        process = self.child_process
        t0 = time.monotonic()
        super().stop()
        if process is not None and process.exitcode is not None:
            self.stop_s, self.exitcode = time.monotonic() - t0, process.exitcode
            log.info("rollout child stopped in %.1f s (exit code %d)", self.stop_s, self.exitcode)
