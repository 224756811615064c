"""Deterministic generation: `generate(family, seed, length)` and `get_task(id)`."""

from __future__ import annotations

import re

from fathom.tasks.families import MODULES
from fathom.tasks.families.base import Spec
from fathom.tasks.record import Task, check_length, parse_id, rngs, split_of_seed

FAMILIES: tuple[str, ...] = tuple(MODULES)

_registry: dict[str, Task] = {}
"""Tasks loaded from files or the Hub (see loaders.register); synthetic ids regenerate instead."""


def family_module(family: str):
    """The generator module of a task family; ValueError naming the family and the known ones otherwise."""
    if family not in MODULES:
        raise ValueError(f"task family {family!r} is unknown; choose one of {', '.join(FAMILIES)}")
    return MODULES[family]


def generate(family: str, seed: int, length: int, *, distractors: bool | None = None,
             haystack: str | None = None) -> Task:
    """The task for (family, seed, length), identical on every run and, for its gold, on every machine.

    `distractors` defaults to on for difficulty tiers 1 and 2 (difficulty = seed % 3); passing it
    explicitly adds `-d0`/`-d1` to the id. `haystack` overrides $FATHOM_HAYSTACK (auto, stdlib, synthetic).
    """
    module = family_module(family)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed {seed!r} must be a non-negative integer")
    check_length(length)
    split = split_of_seed(seed)
    difficulty = seed % 3
    facts, place = rngs(family, seed, length)
    spec = Spec(family=family, seed=seed, length=length, split=split, difficulty=difficulty,
                distractors=difficulty > 0 if distractors is None else bool(distractors),
                facts=facts, place=place, haystack_kind=haystack, id_override=distractors)
    return module.generate(spec)


def get_task(task_id: str) -> Task:
    """Regenerate a task from its id (or return a registered loaded task); KeyError if unknown."""
    if task_id in _registry:
        return _registry[task_id]
    from fathom.tasks import store

    if store.parse(task_id) is not None:
        return store.load(task_id)  # an imported split's row, from the pinned store on disk
    family, seed, length, distractors = parse_id(task_id)
    if family not in MODULES:
        raise KeyError(f"unknown task id {task_id!r}: family {family!r} is not one of {', '.join(FAMILIES)}")
    try:
        task = generate(family, seed, length, distractors=distractors)
    except ValueError as e:
        raise KeyError(f"unknown task id {task_id!r}: {e}") from None
    if task.id != task_id:  # one spelling per task, so ids stay usable as keys
        raise KeyError(f"unknown task id {task_id!r}: write it as {task.id!r}")
    return task


def describe(task_id: str) -> tuple[str, int]:
    """(family, context length) of any task id without building its context; KeyError if unknown."""
    if task_id in _registry:
        t = _registry[task_id]
        return t.family, len(t.context)
    from fathom.tasks import store

    if store.parse(task_id) is not None:
        return store.describe(task_id)
    family, _seed, length, _d = parse_id(task_id)
    if family not in MODULES:
        raise KeyError(f"unknown task id {task_id!r}: it names family {family!r}; choose one of {', '.join(FAMILIES)} "
                       "or an imported split's NAME-ROW")
    return family, length


_QUESTION = re.compile(r"/q(\d+)(?:\+|$)")


def question_phrasings(family: str, split: str = "train") -> list[str]:
    """The question phrasings a family draws from in one split; empty where the family words its questions by
    kind of question instead (code_qa, aggregate)."""
    templates = getattr(family_module(family), "TEMPLATES", {}).get(split, {})
    return list(templates.get("question", []))


def question_phrasing(task: Task) -> int | None:
    """Which of its family's question phrasings the task uses (an index into `question_phrasings`), or None."""
    m = _QUESTION.search(task.metadata.template)
    return int(m.group(1)) if m else None


def registered(task_id: str) -> Task | None:
    """The loaded task with this id, if any."""
    return _registry.get(task_id)


def register(tasks: list[Task]) -> None:
    """Make loaded tasks reachable through get_task(id)."""
    for t in tasks:
        _registry[t.id] = t
