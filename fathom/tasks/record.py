"""The task record, its id format, length tags and seed-to-split partition.

An id such as `needle-64k-s1000123` names everything needed to regenerate the task:
family, length in characters (k = 1024, m = 2**20) and seed. An optional `-d0`/`-d1`
suffix overrides whether distractors are present (default: on for difficulty tiers 1 and 2).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

GENERATOR_VERSION = "1"
"""Bumped whenever a generator's output for a given id changes; recorded in every task and manifest."""

MIN_LENGTH = 2**10
MAX_LENGTH = 10 * 2**20
CHARS_PER_TOKEN = 4
"""Rough characters per token of English prose and code, for `est_tokens`."""

SPLITS = ("train", "test", "heldout")
SEED_BLOCK = 1_000_000
"""Seeds [0, 1e6) are train, [1e6, 2e6) test, [2e6, ...) heldout; templates and values follow the seed's split."""

AnswerType = Literal["number", "string", "set"]


class Gold(BaseModel):
    """The checkable answer. Never part of anything the model or the sandbox sees."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    answer: str
    """Canonical answer text."""
    aliases: list[str] = []
    """Other accepted spellings, compared after the same normalisation."""
    type: AnswerType = "string"
    """number: numeric tolerance; string: normalised exact match; set: F1 over `items`."""
    items: list[str] = []
    """For `set` answers: canonical elements, e.g. `R0012|R0345` for a pair."""


class TaskMetadata(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    length_chars: int
    est_tokens: int
    needle_positions: list[int] = []
    """Character offsets of inserted facts (needles, links, planted records or files)."""
    difficulty: int
    """0 easy, 1 medium, 2 hard: more facts, hops, distractors."""
    distractors: bool
    generator_version: str = GENERATOR_VERSION
    seed: int
    split: str
    """The split whose templates and value space this seed draws from."""
    template: str
    """Id of the question/fact template set, e.g. `needle/test/1`; disjoint across splits."""
    haystack: str
    """`stdlib/<python version>` or `synthetic/v1`: what the filler text came from."""
    token_budget: int
    """Total tokens (root + sub-calls) a good solution should need; the reward's token budget."""
    values: list[str] = []
    """Planted values (needle values, chain values) for the split-disjointness check."""
    extra: dict[str, Any] = {}


@dataclass(frozen=True, slots=True)
class Task:
    id: str
    family: str
    question: str
    context: str
    gold: Gold
    metadata: TaskMetadata

    def public(self) -> dict[str, str]:
        """What the model and sandbox may see: id, question and context. Never gold or metadata."""
        return {"id": self.id, "question": self.question, "context": self.context}

    def digest(self) -> str:
        """SHA-256 over id, question, context and gold: the manifest's per-task checksum."""
        return task_digest(self.id, self.question, self.gold, self.context.encode())

    def gold_digest(self) -> str:
        """SHA-256 over id, question and gold only; independent of the haystack text."""
        return hashlib.sha256(json.dumps([self.id, self.question, self.gold.model_dump()]).encode()).hexdigest()

    def to_dict(self, *, context: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "family": self.family, "question": self.question,
                             "gold": self.gold.model_dump(), "metadata": self.metadata.model_dump()}
        if context:
            d["context"] = self.context
        return d


def task_digest(task_id: str, question: str, gold: Gold, context: bytes) -> str:
    """`Task.digest` from the context's UTF-8 bytes, so an importer that already holds them makes no second copy."""
    h = hashlib.sha256()
    for part in (task_id, question, gold.model_dump_json()):
        h.update(part.encode())
        h.update(b"\0")
    h.update(context)
    return h.hexdigest()


def length_tag(length: int) -> str:
    if length % 2**20 == 0:
        return f"{length // 2**20}m"
    if length % 2**10 == 0:
        return f"{length // 2**10}k"
    return str(length)


def parse_length(tag: str) -> int:
    m = re.fullmatch(r"(\d+)([km]?)", tag.strip().lower())
    if not m:
        raise ValueError(f"length {tag!r} is not a number of characters like 1024, 64k or 1m")
    return int(m.group(1)) * {"": 1, "k": 2**10, "m": 2**20}[m.group(2)]


def check_length(length: int) -> int:
    if not isinstance(length, int) or not MIN_LENGTH <= length <= MAX_LENGTH:
        raise ValueError(f"length {length!r} is outside {MIN_LENGTH}..{MAX_LENGTH} characters (1k..10m)")
    return length


def split_of_seed(seed: int) -> str:
    if seed < 0:
        raise ValueError(f"seed {seed} is negative; seeds are non-negative integers")
    return SPLITS[min(seed // SEED_BLOCK, 2)]


def make_id(family: str, seed: int, length: int, distractors: bool | None = None) -> str:
    tail = "" if distractors is None else f"-d{int(distractors)}"
    return f"{family}-{length_tag(length)}-s{seed}{tail}"


_ID = re.compile(r"(?P<family>[a-z_]+)-(?P<length>\d+[km]?)-s(?P<seed>\d+)(?:-d(?P<d>[01]))?")


def parse_id(task_id: str) -> tuple[str, int, int, bool | None]:
    """(family, seed, length, distractors override) or KeyError naming the id."""
    m = _ID.fullmatch(task_id.strip()) if isinstance(task_id, str) else None
    if not m:
        raise KeyError(f"unknown task id {task_id!r}: expected FAMILY-LENGTH-sSEED such as needle-64k-s123")
    d = m.group("d")
    return m.group("family"), int(m.group("seed")), parse_length(m.group("length")), None if d is None else d == "1"


def rngs(family: str, seed: int, length: int) -> tuple[random.Random, random.Random]:
    """Two independent streams: one for everything the gold depends on, one for haystack placement.

    Keeping them apart makes the gold identical on machines whose stdlib text (and so the
    number of draws spent placing facts in it) differs.
    """
    base = f"fathom/{GENERATOR_VERSION}/{family}/{seed}/{length}"
    return random.Random(base + "/facts"), random.Random(base + "/haystack")
