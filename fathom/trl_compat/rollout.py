"""TRL's rollout-side internals: trace chaining and the loop-owning rollout loop, behind public hooks.

`HarnessLoop` is TRL's `_HarnessRolloutLoop` (the loop its spawned rollout child runs) with its private members
turned into hooks a subclass fills in:
- `task_for(prompt)`: what `_run_session` hands the session factory's `create` as its task. TRL passes the dataset
  prompt through untouched, so the task may be a per-rollout record that holds the prompt; the session fills it in.
- `after_rollout(task, rollout)`: on the rollout's pool thread once TRL's rollout has returned (the session verified
  and closed), with the task the session was created with and TRL's rollout tuple. TRL's rollout reward function
  sees only the outcome's total, so what the session read (the episode result) travels in the task.
- `after_scoring(group, samples, records)`: the group's scored samples, each beside the task of the rollout it came
  from (every training row of a rollout carries its task). Whatever it returns is queued for the trainer.
- `push_metrics(values)` and `release_queues()` for what the loop logs and how it lets go of its queues.

`HarnessWorker` is TRL's worker handle: a subclass names its loop class as `loop_cls`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trl.experimental.async_grpo.async_rollout_worker import _chain_to_sequences
from trl.experimental.async_grpo.openenv_harness import (HarnessRolloutWorker, _HarnessRolloutLoop,
                                                         _turns_from_training_trace)

ROW_TASK = "fathom_task"
"""The attribute each of TRL's `TrainingSequence` rows of a rollout gets: the task its session was created with."""

ROLLOUT_ROWS = 2
"""Where the training rows sit in the rollout tuple `_run_session` returns: (completion, completion ids, rows,
tool calls, tool failures, reward)."""

ROLLOUT_REWARD = 5
"""Where the rollout's reward (what the rollout reward function returned; None when unscorable) sits in it."""


def chain_trace(trace: Any, rollout_id: Any, fork_threshold: int) -> tuple[list[Any], dict[str, float]]:
    """TRL's own chaining of an OpenEnv `TrainingTrace` into training rows, as GRPO does it: (rows, drift tally).
    Each row has `input_ids`, `completion_mask`, `old_log_probs` and `rollout_id`; a turn whose prompt does not
    extend the row by more than `fork_threshold` drifted tokens starts a new row."""
    return _chain_to_sequences(_turns_from_training_trace(trace), rollout_id, fork_threshold)


class HarnessLoop(_HarnessRolloutLoop):
    """TRL's loop-owning rollout loop with the hooks of the module docstring (the defaults are TRL's behaviour)."""

    def task_for(self, prompt: Any) -> Any:
        return prompt

    def after_rollout(self, task: Any, rollout: tuple) -> None:
        return None

    def after_scoring(self, group: Any, samples: list[Any], tasks: list[Any]) -> list[Any]:
        return samples

    def push_metrics(self, values: dict[str, Any]) -> None:
        """Into the trainer's next log line: a float is averaged, a (sum, count) pair is reduced as a rate."""
        self._push_metrics(values)

    def release_queues(self) -> None:
        """Stop joining the sample and metric queues' feeder threads at exit (the trainer no longer reads them)."""
        for queue in (self.rollout_buffer, self._metrics_queue):
            queue.cancel_join_thread()

    def _run_session(self, prompt, group_id=0):  # TRL's pool-thread rollout
        task = self.task_for(prompt)
        rollout, metrics = super()._run_session(task, group_id)
        for row in rollout[ROLLOUT_ROWS]:
            setattr(row, ROW_TASK, task)
        self.after_rollout(task, rollout)
        return rollout, metrics

    async def _score_group(self, group):  # TRL's RolloutGroup
        samples = await super()._score_group(group)
        return self.after_scoring(group, samples, tasks_of(group, samples))


def tasks_of(group: Any, samples: Sequence[Any]) -> list[Any]:
    """The task of each scored sample: TRL makes one sample per training row, conversation by conversation, in
    order, so the group's rows line up with its samples."""
    rows = [row for rows in group.completions_sequences for row in rows]
    if len(rows) != len(samples):
        raise RuntimeError(f"group {group.group_id}: TRL scored {len(samples)} samples from {len(rows)} training rows; "
                           "fathom.trl_compat.rollout expects one sample per row (is TRL still 1.15.0?)")
    return [getattr(row, ROW_TASK, None) for row in rows]


class HarnessWorker(HarnessRolloutWorker):
    """TRL's worker handle; its spawned child builds and runs `loop_cls` with the worker's keywords."""

    loop_cls: type[HarnessLoop] = HarnessLoop

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        cls._loop_cls = cls.loop_cls

    @property
    def child_process(self) -> Any:
        """The spawned child (a multiprocessing Process), or None before `start()`."""
        return self._process


__all__ = ["ROLLOUT_REWARD", "ROLLOUT_ROWS", "ROW_TASK", "HarnessLoop", "HarnessWorker", "chain_trace", "tasks_of"]
