"""`bios`, the family that needs llm(): deterministic, distractors as designed, gold read back by the reference
program through the teacher's sub-call answers, and no short program reads it without a sub-call."""

from __future__ import annotations

import re

import pytest

from fathom.tasks import generate, reference_solution, score, subcall_answer
from fathom.tasks.families import bios
from tests.unit.tasks.restricted import run_restricted


def _prompts(task) -> tuple[list[object], list[str]]:
    sent: list[str] = []

    def llm(prompt: str) -> str:
        sent.append(prompt)
        return subcall_answer(prompt) or ""

    return run_restricted(reference_solution(task.question), task.context, task.question, llm=llm), sent


def test_generation_is_deterministic() -> None:
    for seed in (0, 1, 2, 1_000_004, 2_000_005):
        a, b = generate("bios", seed, 8192), generate("bios", seed, 8192)
        assert a.digest() == b.digest() and a.gold_digest() == b.gold_digest()
    assert generate("bios", 0, 8192).digest() != generate("bios", 3, 8192).digest()


@pytest.mark.parametrize("base", [0, 1_000_000, 2_000_000])
def test_reference_program_with_one_subcall_gets_the_gold_over_many_seeds(base: int) -> None:
    for seed in range(base, base + 150):
        t = generate("bios", seed, (1024, 4096, 32768)[seed % 3])
        finals, sent = _prompts(t)
        assert len(sent) == 1 and len(finals) == 1, t.id
        assert score(t, str(finals[0]), via_final=True, total_tokens=0, llm_calls=1).correct, (t.id, sent[0])
        # One plain sub-call over a few lines: far below env_server.sub_rlm_min_chars (8,000), where llm()
        # would start a nested RLM episode instead.
        assert len(sent[0]) < 1000 and t.question in sent[0]


def test_distractors_by_tier() -> None:
    for seed in range(60):
        t = generate("bios", seed, 8192)
        who, home = t.metadata.extra["person"], t.gold.answer
        lines = t.context.splitlines()
        about = [ln for ln in lines if who in ln]
        first, last = who.split()
        cities = [c.split("/")[0] for c in bios.CITIES["train"]]
        near = [ln for ln in lines if (f"{first} " in ln or f" {last}" in ln) and who not in ln
                and any(c in ln for c in cities)]
        if t.metadata.difficulty == 0:
            assert t.metadata.extra["kind"] == "plain" and len(about) == 1
        else:
            assert t.metadata.extra["kind"] in ("moved", "denied")  # a former or a denied city beside the true one
            at = t.metadata.needle_positions[0]
            passage = t.context[at:t.context.index("\n", at)]
            assert who in passage and sum(c in passage for c in cities) == 2, passage
            assert near, t.id  # a near-duplicate name lives somewhere
        if t.metadata.difficulty == 2:
            assert len(about) == 2 and any(home not in ln for ln in about)  # named in passing, elsewhere


def test_gold_has_the_country_as_an_alias() -> None:
    t = generate("bios", 2_000_001, 4096)
    assert t.gold.aliases == [f"{t.gold.answer}, {dict(c.split('/') for c in bios.CITIES['heldout'])[t.gold.answer]}"]
    assert score(t, t.gold.aliases[0], via_final=True, total_tokens=0, llm_calls=1).correct
    assert not score(t, f"{t.metadata.extra['person']} lives in {t.gold.answer}.", via_final=True, total_tokens=0,
                     llm_calls=1).correct  # a wordy reply is wrong: the sub-call must answer with the city


def test_cities_and_wordings_are_disjoint_across_splits() -> None:
    cities = {s: {c.split("/")[0] for c in v} for s, v in bios.CITIES.items()}
    assert not cities["train"] & cities["test"] and not cities["train"] & cities["heldout"]
    assert not cities["test"] & cities["heldout"]
    for split in ("test", "heldout"):
        for kind, texts in bios.TEMPLATES[split].items():
            assert not set(texts) & set(bios.TEMPLATES["train"][kind]), (split, kind)


def test_read_answers_only_its_own_prompts() -> None:
    assert bios.read("What is 2+3?") is None
    t = generate("bios", 2, 4096)
    mention = next(ln for ln in t.context.splitlines() if t.metadata.extra["person"] in ln
                   and re.search(r"\b(met|visit)\b", ln))
    assert bios.read(mention + "\n\n" + t.question) is None  # a passing mention never says where they live
    assert subcall_answer("Summarise this text.\nSome text.") is None


def test_no_short_program_reads_the_city_without_a_subcall() -> None:
    """The city after the first ' in ' of the person's passage, the obvious one-liner: wrong on most distractor
    tasks, so the family needs llm() (or far more code than the output cap allows)."""
    right = total = 0
    for seed in range(300):
        t = generate("bios", seed, 4096)
        if not t.metadata.distractors:
            continue
        passage = next(ln for ln in t.context.splitlines() if t.metadata.extra["person"] in ln)
        m = re.search(r" in ([A-Z][a-z]+)", passage)
        right += bool(m and m.group(1) == t.gold.answer)
        total += 1
    assert total > 150 and right / total < 0.6, (right, total)
