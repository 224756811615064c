"""Pinned manifests: loading, SHA-256 verification, and no seed, value or template shared across splits."""

from __future__ import annotations

import hashlib
import json

import pytest

from fathom.tasks import FAMILIES, generate, get_task, load_split
from fathom.tasks import splits
from fathom.tasks.families import MODULES
from fathom.tasks.families.records import OPENERS, PHRASES
from fathom.tasks.record import SPLITS, split_of_seed


@pytest.fixture(scope="module")
def manifests():
    return {s: splits.read(s) for s in SPLITS}


def test_pinned_sizes_and_lengths(manifests) -> None:
    assert len(manifests["train"]["tasks"]) == 1200
    assert 100 <= len(manifests["test"]["tasks"]) <= 200
    test_lengths = [r["length"] for r in manifests["test"]["tasks"]]
    assert max(test_lengths) <= 2**20 and sum(n > 2**18 for n in test_lengths) <= 15
    assert max(r["length"] for r in manifests["heldout"]["tasks"]) == 10 * 2**20
    for m in manifests.values():
        assert {r["family"] for r in m["tasks"]} == set(FAMILIES)
        assert m["haystack"]["source"] in ("stdlib", "synthetic") and len(m["haystack"]["sha256"]) == 64


def test_seeds_values_and_templates_are_disjoint(manifests) -> None:
    seeds = {s: {r["seed"] for r in m["tasks"]} for s, m in manifests.items()}
    templates = {s: {r["template"] for r in m["tasks"]} for s, m in manifests.items()}
    for s, m in manifests.items():
        assert all(split_of_seed(r["seed"]) == s for r in m["tasks"])
    values = {}
    for s in ("train", "test"):
        vals = set()
        for r in manifests[s]["tasks"]:
            if r["family"] in ("needle", "kv_chain") and r["length"] <= 2**16:
                vals |= set(get_task(r["id"]).metadata.values)
        values[s] = vals
    assert values["train"] and values["test"]
    assert not values["train"] & values["test"]
    for a, b in (("train", "test"), ("train", "heldout"), ("test", "heldout")):
        assert not seeds[a] & seeds[b]
        assert not templates[a] & templates[b]


def test_template_text_is_disjoint_across_splits() -> None:
    for family, mod in MODULES.items():
        seen: dict[str, str] = {}
        for split, kinds in mod.TEMPLATES.items():
            for texts in kinds.values():
                for text in texts:
                    assert seen.setdefault(text, split) == split, f"{family} template shared: {text!r}"
    for table in (PHRASES, OPENERS):
        flat = [(s, p) for s, v in table.items() for p in (v if isinstance(v, list) else sum(v.values(), []))]
        assert len({p for _, p in flat}) == len(flat)


def test_load_split_ids_regenerate_and_verify(manifests) -> None:
    ids = load_split("test", verify_sha=True)
    assert ids == [r["id"] for r in manifests["test"]["tasks"]]
    assert len(set(ids)) == len(ids)


def test_verify_catches_tampering(tmp_path, manifests) -> None:
    m = json.loads(json.dumps(manifests["test"]))
    m["tasks"] = m["tasks"][:3]
    m["tasks"][1]["sha256"] = "0" * 64
    m["tasks"][1]["gold_sha256"] = "0" * 64
    splits.write(m, tmp_path)
    assert load_split("test", directory=tmp_path) == [r["id"] for r in m["tasks"]]
    with pytest.raises(splits.ManifestError, match=m["tasks"][1]["id"]):
        load_split("test", verify_sha=True, directory=tmp_path)


def test_foreign_haystack_checks_gold_digest(tmp_path, manifests) -> None:
    m = json.loads(json.dumps(manifests["test"]))
    m["tasks"] = m["tasks"][:5]
    m["haystack"]["sha256"] = "f" * 64  # as if built on another Python patch version
    for r in m["tasks"]:
        r["sha256"] = "0" * 64
    assert splits.verify(m) == {"checked": 5, "full_digest": 0}


def test_build_is_deterministic(tmp_path) -> None:
    a, b = splits.build("heldout", 6), splits.build("heldout", 6)
    assert a == b
    path = splits.write(a, tmp_path)
    assert splits.read("heldout", tmp_path)["tasks"] == a["tasks"]
    assert path.read_text().count("\n") > 6  # one task per line


def test_manifest_errors_say_what_to_do(tmp_path) -> None:
    with pytest.raises(splits.ManifestError, match="fathom tasks build --split test"):
        splits.read("test", tmp_path)
    (tmp_path / "test.json").write_text("{not json")
    with pytest.raises(splits.ManifestError, match="malformed"):
        splits.read("test", tmp_path)
    with pytest.raises(splits.ManifestError, match="unknown"):
        load_split("dev")


def test_stats_counts() -> None:
    rows = [{"family": "needle", "length": 1024}, {"family": "needle", "length": 2**20}, {"family": "pairs", "length": 1024}]
    s = splits.stats(rows)
    assert s["by_family"] == {"needle": 2, "pairs": 1}
    assert s["by_length"] == {"1k": 2, "1m": 1}
    assert s["by_family_length"]["needle"] == {"1k": 1, "1m": 1}


def test_configure_applies_tasks_config(tmp_path) -> None:
    from fathom.config import load_config
    from fathom.tasks import configure, generate

    before = generate("needle", 1, 4096).metadata.haystack
    m = splits.build("test", 2)
    splits.write(m, tmp_path)
    cfg = load_config(None, [f"tasks.manifest_dir={str(tmp_path)!r}", "tasks.haystack='synthetic'"]).tasks
    try:
        configure(cfg)
        assert load_split("test") == [r["id"] for r in m["tasks"]]
        assert generate("needle", 1, 4096).metadata.haystack == "synthetic/v1"
    finally:
        configure(load_config(None, []).tasks)
    assert len(load_split("test")) > 2
    assert generate("needle", 1, 4096).metadata.haystack == before


def test_heldout_grew_to_240_keeping_its_first_100(manifests) -> None:
    """Results on the first 100 held-out tasks stay comparable with runs made when the split had only those."""
    tasks = manifests["heldout"]["tasks"]
    assert len(tasks) == 240 and [r["seed"] for r in tasks] == list(range(2_000_000, 2_000_240))
    assert [(r["family"], r["seed"], r["length"]) for r in tasks[:100]] == splits.plan("heldout", 100)
    # SHA-256 over "id:sha256" lines of the 100-task manifest that earlier runs were scored on.
    first = "\n".join(f"{r['id']}:{r['sha256']}" for r in tasks[:100])
    assert hashlib.sha256(first.encode()).hexdigest() == "9c619a1f48ce1fd48302e05db4dadc3be899ccd3240f30bbed9a8124a30a2552"


def test_train_keys_draw_on_words_no_evaluated_split_has() -> None:
    from fathom.tasks import vocab

    extra = set(vocab.TRAIN_ADJECTIVES) | set(vocab.TRAIN_NOUNS)
    assert len(extra) == len(vocab.TRAIN_ADJECTIVES) + len(vocab.TRAIN_NOUNS)
    assert not extra & (set(vocab.ADJECTIVES) | set(vocab.NOUNS))
    for split in ("test", "heldout"):
        adj, noun = vocab.key_words(split)
        assert not extra & (set(adj) | set(noun))
        assert (adj, noun) == (vocab.part(vocab.ADJECTIVES, split), vocab.part(vocab.NOUNS, split))
    # generate(), not get_task(): other tests register loaded tasks under generated-looking ids.
    words = {w for s in range(40) for w in generate("needle", s, 4096).metadata.extra["key"].split("-")}
    assert words & extra and words - extra


# SHA-256 over "id:sha256" lines of each split's manifest as pinned before `bios` was added (1000/150/200 tasks).
_FIRST_BLOCKS = {"train": "e367c0b612dbead82cf3fa0a521d34e2072f07501cb9ad03f278888eb6803a12",
                "test": "a6528a93ffbddde3ab2412351b1b7a3c829ba6b36e7abd94ad2068e1df8d88fc",
                "heldout": "5ccf4a806e9b0b7904b3fe1082e2ae73ca6571c1605bd5674c2def175fda0ccb"}


@pytest.mark.parametrize("split", SPLITS)
def test_a_family_added_later_leaves_the_first_block_as_it_was(manifests, split: str) -> None:
    tasks = manifests[split]["tasks"]
    first = splits.FIRST_BLOCK[split]
    text = "\n".join(f"{r['id']}:{r['sha256']}" for r in tasks[:first])
    assert hashlib.sha256(text.encode()).hexdigest() == _FIRST_BLOCKS[split]
    assert {r["family"] for r in tasks[:first]} == set(FAMILIES[:splits.FIRST_FAMILIES])
    assert {r["family"] for r in tasks[first:]} == set(FAMILIES[splits.FIRST_FAMILIES:]) == {"bios"}
    assert len(tasks) == splits.DEFAULT_N[split]
    assert [(r["family"], r["seed"], r["length"]) for r in tasks] == splits.plan(split, len(tasks))


def test_rounds_keep_the_first_n_and_add_later_families_in_proportion(manifests) -> None:
    ids = [r["id"] for r in manifests["heldout"]["tasks"]]
    picked = splits.rounds("heldout", ids, 100)
    assert [t for t in picked if not t.startswith("bios-")] == ids[:100]
    assert [t for t in picked if t.startswith("bios-")] == ids[200:220]
    assert picked[:6] == ids[:5] + [ids[200]]  # one round: a task of each first family, then one bios task
    assert splits.rounds("heldout", ids) == [t for t in picked] + [
        t for t in splits.rounds("heldout", ids) if t not in picked]
    assert sorted(splits.rounds("heldout", ids)) == sorted(ids)
    assert splits.rounds("test", ids[:7], 3) == ids[:3]  # a manifest within its first block keeps its order
