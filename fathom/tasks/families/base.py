"""What every family generator receives and how it assembles a Task."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from fathom.tasks import haystack
from fathom.tasks.record import CHARS_PER_TOKEN, Gold, Task, TaskMetadata, make_id

# Fallback base budgets in tokens (root + sub-calls) for a 1K-character task; see `token_budget`.
BASE_BUDGET = {"needle": 1500, "kv_chain": 2500, "aggregate": 3000, "pairs": 3500, "code_qa": 2500, "bios": 2000}

STALE_MARKERS = ("outdated", "no longer", "superseded", "retired", "obsolete", "formerly", "revoked")
"""Words that mark a stale fact in the templates of the code-solved families; true facts there never contain them
(bios is the exception by design: its true passage may say "formerly of X, now ...", and reading past it is the
task)."""


@dataclass
class Spec:
    family: str
    seed: int
    length: int
    split: str
    difficulty: int
    distractors: bool
    facts: random.Random
    """Draws everything the gold depends on."""
    place: random.Random
    """Draws haystack offsets and insertion points only."""
    haystack_kind: str | None = None
    id_override: bool | None = None
    positions: list[int] = field(default_factory=list)

    @property
    def task_id(self) -> str:
        return make_id(self.family, self.seed, self.length, self.id_override)


def token_budget(family: str, length: int, difficulty: int) -> int:
    """Budget grows with log2(length): a longer document needs more probing, not proportionally more reading."""
    doublings = math.log2(max(length, 1024) / 1024)
    return int(BASE_BUDGET[family] * (1 + 0.15 * doublings) * (1 + 0.25 * difficulty))


def pick(rng: random.Random, options: list[str], kind: str, split: str, family: str) -> tuple[str, str]:
    """Choose a template; returns (template text, `family/split/kind<i>` id)."""
    i = rng.randrange(len(options))
    return options[i], f"{family}/{split}/{kind}{i}"


def assemble(spec: Spec, question: str, context: str, gold: Gold, template: str, *,
             values: list[str] | None = None, extra: dict | None = None) -> Task:
    if len(context) != spec.length:
        raise AssertionError(f"{spec.task_id}: generated {len(context)} characters, expected {spec.length}")
    src = haystack.corpus(spec.haystack_kind)
    meta = TaskMetadata(
        length_chars=len(context),
        est_tokens=len(context) // CHARS_PER_TOKEN,
        needle_positions=spec.positions,
        difficulty=spec.difficulty,
        distractors=spec.distractors,
        seed=spec.seed,
        split=spec.split,
        template=template,
        haystack=f"{src.source}/{src.version}",
        token_budget=token_budget(spec.family, spec.length, spec.difficulty),
        values=values or [],
        extra=extra or {},
    )
    return Task(spec.task_id, spec.family, question, context, gold, meta)


class Lines:
    """Accumulates newline-terminated lines in joined chunks, so a document of 100k records never
    holds 100k separate line objects at once (peak memory stays near twice the context)."""

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.cur: list[str] = []
        self.size = 0
        self.count = 0

    def add(self, line: str) -> int:
        """Append a line; returns its character offset."""
        at = self.size
        self.cur.append(line + "\n")
        self.size += len(line) + 1
        self.count += 1
        if len(self.cur) >= 4096:
            self.chunks.append("".join(self.cur))
            self.cur = []
        return at


def pad(spec: Spec, lines: Lines) -> str:
    """The lines, then haystack text up to the spec's length."""
    need = spec.length - lines.size
    if need < 0:
        raise AssertionError(f"{spec.task_id}: body of {lines.size} chars exceeds length {spec.length}")
    tail = haystack.filler(spec.place, need, spec.haystack_kind)
    out = "".join(lines.chunks + lines.cur + [tail])
    lines.chunks, lines.cur = [], []
    return out
