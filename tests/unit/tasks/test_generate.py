"""Generation: determinism, exact lengths, ids, metadata, haystack sources and independence of the gold."""

from __future__ import annotations

import pytest

from fathom.tasks import FAMILIES, generate, get_task, haystack
from fathom.tasks.record import GENERATOR_VERSION, MAX_LENGTH, parse_id

LENGTHS = [1024, 2048, 3000, 65536]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("length", LENGTHS)
def test_exact_length_and_determinism(family: str, length: int) -> None:
    for seed in (0, 1, 2, 1_000_005, 2_000_004):
        a, b = generate(family, seed, length), generate(family, seed, length)
        assert len(a.context) == length == a.metadata.length_chars
        assert a.digest() == b.digest()
        assert a.context.isascii()
        assert get_task(a.id).digest() == a.digest()


@pytest.mark.parametrize("family", FAMILIES)
def test_ten_million_characters(family: str) -> None:
    t = generate(family, 7, MAX_LENGTH)
    assert len(t.context) == MAX_LENGTH
    assert t.metadata.est_tokens == MAX_LENGTH // 4


@pytest.mark.parametrize("family", FAMILIES)
def test_seeds_and_lengths_change_the_task(family: str) -> None:
    digests = {generate(family, s, 8192).gold_digest() for s in range(6)}
    assert len(digests) == 6
    assert generate(family, 3, 8192).digest() != generate(family, 3, 16384).digest()


def test_metadata_fields() -> None:
    t = generate("needle", 2, 32768)
    m = t.metadata
    assert (m.seed, m.split, m.difficulty, m.distractors) == (2, "train", 2, True)
    assert m.generator_version == GENERATOR_VERSION
    assert m.haystack.startswith(("stdlib/", "synthetic/"))
    assert m.token_budget > 0 and m.template.startswith("needle/train/")
    assert len(m.needle_positions) >= 4
    first = m.needle_positions[0]
    assert t.gold.answer in t.context[first:first + 120]  # the asked needle sits at the first recorded position


def test_distractor_override_is_in_the_id() -> None:
    plain, with_d = generate("kv_chain", 3, 8192, distractors=False), generate("kv_chain", 3, 8192, distractors=True)
    assert plain.id.endswith("-d0") and with_d.id.endswith("-d1")
    assert not plain.metadata.distractors and with_d.metadata.distractors
    assert get_task(with_d.id).digest() == with_d.digest()
    assert "revoked" not in plain.context and "revoked" in with_d.context


def test_gold_is_independent_of_the_haystack() -> None:
    for family in FAMILIES:
        for seed in range(4):
            a = generate(family, seed, 16384, haystack="stdlib")
            b = generate(family, seed, 16384, haystack="synthetic")
            assert a.gold_digest() == b.gold_digest()
            assert a.metadata.haystack != b.metadata.haystack


def test_synthetic_fallback_when_stdlib_is_absent(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(haystack.sysconfig, "get_paths", lambda: {"stdlib": str(tmp_path / "missing")})
    haystack._corpus.cache_clear()
    try:
        assert haystack.corpus("auto").source == "synthetic"
        with pytest.raises(RuntimeError, match="FATHOM_HAYSTACK"):
            haystack.corpus("stdlib")
        t = generate("needle", 1, 4096)
        assert t.metadata.haystack == "synthetic/v1"
    finally:
        haystack._corpus.cache_clear()
    with pytest.raises(ValueError, match="unknown"):
        haystack.corpus("bogus")


def test_stdlib_haystack_is_real_python() -> None:
    c = haystack.corpus("stdlib")
    assert c.source == "stdlib" and c.files > 50
    assert "def " in c.text and '"""' in c.text and haystack.FILE_HEADER + "lib/" in c.text


@pytest.mark.parametrize("bad", ["nope", "needle-64k", "needle-64k-sX", "needle-3g-s1", "", "needle-64k-s1-d2"])
def test_bad_ids_raise_keyerror(bad: str) -> None:
    with pytest.raises(KeyError, match="unknown task id"):
        get_task(bad)


def test_unknown_family_and_bad_length_in_id() -> None:
    with pytest.raises(KeyError, match="family"):
        get_task("haystack-64k-s1")
    with pytest.raises(KeyError, match="outside"):
        get_task("needle-11m-s1")
    with pytest.raises(KeyError, match="write it as 'needle-1k-s5'"):
        get_task("needle-1024-s5")
    with pytest.raises(ValueError, match="family"):
        generate("nope", 1, 4096)
    with pytest.raises(ValueError, match="outside"):
        generate("needle", 1, 100)
    with pytest.raises(ValueError, match="negative"):
        generate("needle", -1, 4096)


def test_id_round_trip() -> None:
    assert parse_id("needle-1m-s5") == ("needle", 5, 2**20, None)
    assert parse_id("code_qa-10m-s2000001-d1") == ("code_qa", 2_000_001, 10 * 2**20, True)
    assert generate("pairs", 9, 3000).id == "pairs-3000-s9"


def test_public_view_hides_gold_and_metadata() -> None:
    for family in FAMILIES:
        t = generate(family, 4, 8192)
        assert set(t.public()) == {"id", "question", "context"}
        assert t.gold.answer not in t.question
        assert t.gold.model_dump_json() not in t.context
        assert "gold" not in t.question.lower()


@pytest.mark.parametrize("family", FAMILIES)
def test_question_phrasing_names_the_template_the_question_uses(family: str) -> None:
    import re

    from fathom.tasks.generate import question_phrasing, question_phrasings

    options = question_phrasings(family)
    used = set()
    for seed in range(24):
        t = generate(family, seed, 2048)
        i = question_phrasing(t)
        if not options:
            assert i is None
            continue
        used.add(i)
        pattern = ".+".join(re.escape(part) for part in re.split(r"\{\w+\}", options[i]))
        assert re.search(pattern, t.question), (options[i], t.question)
    assert used == set(range(len(options)))  # 24 seeds reach every train phrasing
    with pytest.raises(ValueError, match="task family 'essay' is unknown"):
        question_phrasings("essay")
