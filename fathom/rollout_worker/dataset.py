"""The training dataset: one row per task, its prompt column holding the task id as a user message.

TRL's worker passes the prompt to `FathomSessionFactory.create` as `task`, and runs `num_generations`
rollouts of each row as one GRPO group, so every generation of a group gets the same task.
"""

from __future__ import annotations

from fathom.tasks.generate import FAMILIES
from fathom.tasks.record import make_id
from fathom.tasks.splits import plan, rounds


def training_task_ids(n: int, max_length: int | None = None, families: list[str] | None = None) -> list[str]:
    """The first `n` tasks of the train split's plan (families round-robin, in `splits.rounds` order), at most
    `max_length` characters, of `families` only when given."""
    unknown = sorted(set(families or ()) - set(FAMILIES))
    if unknown:
        raise ValueError(f"trainer.train_families names unknown families {unknown}; choose from {', '.join(FAMILIES)}")
    keep = {make_id(family, seed, length) for family, seed, length in plan("train", n)
            if (max_length is None or length <= max_length) and (not families or family in families)}
    # In rounds, so a family added after the split's first block trains from the first step on, while the first
    # families keep their order.
    ids = [t for t in rounds("train", [make_id(*r) for r in plan("train", n)]) if t in keep]
    if not ids:
        raise ValueError(f"no training task has a context of at most {max_length} characters in families "
                         f"{families or 'all'}; raise trainer.train_max_length (train lengths are 1k..128k) "
                         "or trainer.train_split_size")
    return ids


def prompt_rows(task_ids: list[str]) -> dict[str, list]:
    """Columns for `datasets.Dataset.from_dict`: the prompt column TRL reads, plus the id for logging."""
    return {"prompt": [[{"role": "user", "content": t}] for t in task_ids], "task_id": list(task_ids)}
