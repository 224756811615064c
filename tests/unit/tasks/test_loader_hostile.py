"""Hostile task files: each bad row is refused with a ValueError naming the file, the row and the fix."""

from __future__ import annotations

import json

import pytest

from fathom.tasks import get_task, load_jsonl
from fathom.tasks.loaders import from_rows

GOOD = {"id": "h-1", "question": "Q?", "context": "some text", "answer": "x"}


def _file(tmp_path, *lines: str):
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize("line, needle", [
    ('{"id": "h-1", "question": ', "t.jsonl:1 is not valid JSON"),
    ("[1, 2, 3]", "is a JSON list, not an object"),
    ('"just text"', "is a JSON str, not an object"),
    (json.dumps({**GOOD, "question": {"q": 1}}), "'question' must be a string"),
    (json.dumps({**GOOD, "context": ["a", "b"]}), "'context' must be a string"),
    (json.dumps({**GOOD, "id": {"x": 1}}), "'id' must be str or int"),
    (json.dumps({**GOOD, "aliases": "y"}), "'aliases' must be list"),
    (json.dumps({**GOOD, "token_budget": "lots"}), "token_budget must be a positive integer"),
    (json.dumps({**GOOD, "answer": {"answer": 3, "type": "colour"}}), "answer object is not a gold record"),
    (json.dumps({**GOOD, "answer": "x", "answer_type": "colour"}), "must be number, string or set"),
    (json.dumps({"id": "h-1", "context": "c", "answer": "x"}), "lacks question"),
])
def test_bad_rows_are_refused_naming_the_row(tmp_path, line, needle):
    with pytest.raises(ValueError, match="t.jsonl") as e:
        load_jsonl(_file(tmp_path, line))
    assert needle in str(e.value)


def test_oversized_context_is_refused(tmp_path):
    with pytest.raises(ValueError, match="over the 1,000 cap; split the document or pass max_context_chars="):
        load_jsonl(_file(tmp_path, json.dumps({**GOOD, "context": "x" * 1001})), max_context_chars=1000)


def test_unknown_id_is_a_key_error_naming_it():
    with pytest.raises(KeyError, match="never-loaded"):
        get_task("never-loaded")


def test_replayed_ids_are_refused(tmp_path):
    with pytest.raises(ValueError, match="duplicate task ids"):
        load_jsonl(_file(tmp_path, json.dumps({**GOOD, "id": "dup"}), json.dumps({**GOOD, "id": "dup"})))
    from_rows([{**GOOD, "id": "h-replay"}], "first.jsonl")
    from_rows([{**GOOD, "id": "h-replay"}], "again.jsonl")  # the same row again is harmless
    with pytest.raises(ValueError, match="'h-replay' is already loaded with other content"):
        from_rows([{**GOOD, "id": "h-replay", "context": "different"}], "other.jsonl")
    assert get_task("h-replay").context == "some text"


def test_missing_file_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_jsonl(tmp_path / "nope.jsonl")
