"""Loading tasks from a local JSONL file (the Hub path uses the same row mapping)."""

from __future__ import annotations

import json

import pytest

from fathom.tasks import generate, get_task, load_jsonl, score
from fathom.tasks.loaders import write_jsonl


def test_round_trip_of_generated_tasks(tmp_path) -> None:
    tasks = [generate(f, 3, 4096) for f in ("needle", "pairs", "code_qa")]
    path = write_jsonl(tasks, tmp_path / "t.jsonl")
    loaded = load_jsonl(path)
    assert [t.id for t in loaded] == [t.id for t in tasks]
    for a, b in zip(tasks, loaded):
        assert (a.question, a.context, a.gold) == (b.question, b.context, b.gold)


def test_foreign_columns_and_plain_answers(tmp_path) -> None:
    rows = [
        {"uid": "sniah-1", "input": "ctx " * 50 + "The key is 77.", "query": "What is the key?", "target": 77},
        {"uid": "oolong-2", "input": "a b c", "query": "Which labels?", "target": ["spam", "ham"]},
        {"uid": "qa-3", "input": "Paris is in France.", "query": "Capital?", "target": "Paris", "aliases": ["paris, fr"]},
    ]
    path = tmp_path / "ext.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    fields = {"id": "uid", "context": "input", "question": "query", "answer": "target"}
    a, b, c = load_jsonl(path, fields)
    assert a.gold.type == "number" and score(a, "77", via_final=True, total_tokens=1, llm_calls=0).correct
    assert b.gold.type == "set" and score(b, "ham; spam", via_final=True, total_tokens=1, llm_calls=0).correct
    assert not score(b, "spam", via_final=True, total_tokens=1, llm_calls=0).correct
    assert score(c, "Paris, FR", via_final=True, total_tokens=1, llm_calls=0).correct
    assert get_task("oolong-2") is b  # registered for get_task in this process
    assert load_jsonl(path, fields, limit=1)[0].id == "sniah-1"


def test_errors_name_the_row(tmp_path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "q", "context": "c"}) + "\n")
    with pytest.raises(ValueError, match="row 0 lacks answer"):
        load_jsonl(path)
    path.write_text('{"question": "q", \n')
    with pytest.raises(ValueError, match="bad.jsonl:1 is not valid JSON"):
        load_jsonl(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_jsonl(tmp_path / "missing.jsonl")
    path.write_text("\n".join(json.dumps({"id": "x", "question": "q", "context": "c", "answer": 1}) for _ in range(2)))
    with pytest.raises(ValueError, match="duplicate"):
        load_jsonl(path)


def test_hub_loader_reads_a_local_dataset_repo(tmp_path, monkeypatch) -> None:
    """load_hub goes through `datasets`; a local folder laid out like a Hub repo needs no network."""
    pytest.importorskip("datasets")
    from fathom.tasks import load_hub

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    repo = tmp_path / "oolong-mini"
    (repo / "data").mkdir(parents=True)
    rows = [{"q": f"How many apples in row {i}?", "doc": "apple " * i, "gold": i} for i in range(1, 4)]
    (repo / "data" / "test.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    tasks = load_hub(str(repo), split="test", fields={"question": "q", "context": "doc", "answer": "gold"}, limit=2)
    assert [t.gold.answer for t in tasks] == ["1", "2"]
    assert tasks[1].context == "apple apple " and tasks[1].id == "oolong-mini/test-1"
    assert score(tasks[1], "2", via_final=True, total_tokens=1, llm_calls=0).correct
