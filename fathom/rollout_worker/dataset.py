"""The training dataset: one row per task, its prompt column holding the task id as a user message.

TRL's worker passes the prompt to `FathomSessionFactory.create` as `task`, and runs `num_generations`
rollouts of each row as one GRPO group, so every generation of a group gets the same task.
"""

from __future__ import annotations

import random

from fathom.tasks import store
from fathom.tasks.generate import FAMILIES
from fathom.tasks.record import make_id
from fathom.tasks.splits import plan, rounds


def training_task_ids(n: int, max_length: int | None = None, families: list[str] | None = None, *,
                      imported: list[tuple[str, float]] = (), generated_weight: float = 1.0,
                      order_seed: int | None = None) -> list[str]:
    """Up to `n` training task ids: the train split's plan (families round-robin, in `splits.rounds` order, at most
    `max_length` characters,
    of `families` only when given) mixed with imported splits (`(name, weight)`, read from the task store's
    manifests, no context loaded) in proportion to their weights against `generated_weight`. TRL's rollout worker
    takes them in this order, so without `order_seed` every run trains on the same tasks in the same order; with it
    each generated family's tasks are shuffled by that seed and the families stay round-robin, so every stretch of a
    run still sees each family."""
    pools: list[tuple[str, float, list[str]]] = []
    if generated_weight > 0:
        pools.append(("generated", generated_weight, _generated(n, max_length, families, order_seed)))
    for name, weight in imported:
        rows = store.manifest(name)["tasks"]
        ids = [r["id"] for r in rows if max_length is None or r["length"] <= max_length]
        if not ids:
            raise ValueError(f"imported split {name!r} has no task of at most {max_length} characters; raise "
                             "trainer.train_max_length or import shorter documents")
        pools.append((name, weight, ids))
    if not pools:
        raise ValueError("no training tasks: tasks.generated_weight is 0 and no imported split has the train role")
    return mix(pools, n)


def mix(pools: list[tuple[str, float, list[str]]], n: int) -> list[str]:
    """Interleave pools by weight (smooth weighted round-robin), each id at most once, up to `n` ids in all."""
    taken = [0] * len(pools)
    credit = [0.0] * len(pools)
    out: list[str] = []
    while len(out) < n:
        live = [i for i, (_, _, ids) in enumerate(pools) if taken[i] < len(ids)]
        if not live:
            break
        total = sum(pools[i][1] for i in live)
        for i in live:
            credit[i] += pools[i][1]
        i = max(live, key=lambda j: credit[j])
        credit[i] -= total
        out.append(pools[i][2][taken[i]])
        taken[i] += 1
    return out


def _generated(n: int, max_length: int | None, families: list[str] | None, order_seed: int | None) -> list[str]:
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
