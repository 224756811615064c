"""The training dataset: one row per task, its prompt column holding the task id as a user message.

TRL's worker passes the prompt to `FathomSessionFactory.create` as `task`, and runs `num_generations`
rollouts of each row as one GRPO group, so every generation of a group gets the same task.
"""

from __future__ import annotations

import random

from fathom.tasks.generate import FAMILIES
from fathom.tasks.record import make_id
from fathom.tasks.splits import plan


def training_task_ids(n: int, max_length: int | None = None, families: list[str] | None = None,
                      order_seed: int | None = None) -> list[str]:
    """The first `n` tasks of the train split's plan (families round-robin), at most `max_length` characters,
    of `families` only when given. TRL's rollout worker takes them in this order, so without `order_seed` every run
    trains on the same tasks in the same order; with it each family's tasks are shuffled by that seed and the
    families stay round-robin, so every stretch of a run still sees each family."""
    unknown = sorted(set(families or ()) - set(FAMILIES))
    if unknown:
        raise ValueError(f"trainer.train_families names unknown families {unknown}; choose from {', '.join(FAMILIES)}")
    rows = plan("train", n)
    ids = [make_id(family, seed, length) for family, seed, length in rows
           if (max_length is None or length <= max_length) and (not families or family in families)]
    if not ids:
        raise ValueError(f"no training task has a context of at most {max_length} characters in families "
                         f"{families or 'all'}; raise trainer.train_max_length (train lengths are 1k..128k) "
                         "or trainer.train_split_size")
    return ids if order_seed is None else shuffled_round_robin(ids, order_seed)


def shuffled_round_robin(ids: list[str], seed: int) -> list[str]:
    """Each family's ids shuffled by `seed`, then dealt out one family at a time in their first-seen order."""
    from fathom.tasks.record import parse_id

    by_family: dict[str, list[str]] = {}
    for t in ids:
        by_family.setdefault(parse_id(t)[0], []).append(t)
    rng = random.Random(f"fathom/train-order/{seed}")
    for group in by_family.values():
        rng.shuffle(group)
    out: list[str] = []
    for i in range(max(len(g) for g in by_family.values())):
        out += [g[i] for g in by_family.values() if i < len(g)]
    return out


def prompt_rows(task_ids: list[str]) -> dict[str, list]:
    """Columns for `datasets.Dataset.from_dict`: the prompt column TRL reads, plus the id for logging."""
    return {"prompt": [[{"role": "user", "content": t}] for t in task_ids], "task_id": list(task_ids)}
