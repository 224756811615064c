"""Evaluating an imported split: ids resolve from the store's manifest (no context read), rows group by scale."""

from __future__ import annotations

import json

import pytest
import typer

from fathom.config import load_config
from fathom.config.tasks import TaskSource
from fathom.entrypoints.eval_cmd import _task_ids
from fathom.eval.metrics import episode_row, summarize
from fathom.tasks import store
from tests.unit.eval.episodes import episode


@pytest.fixture()
def imported(tmp_path):
    f = tmp_path / "docs.jsonl"
    f.write_text("".join(json.dumps({"question": f"q{i}", "context": "x" * (3000 + 40000 * i), "answer": i}) + "\n"
                         for i in range(3)))
    cfg = load_config(None, ["--tasks.store_dir", str(tmp_path / "store"), "--eval.split", "mydocs"])
    store.set_root(tmp_path / "store")
    store.import_source(TaskSource(name="mydocs", kind="jsonl", path=str(f)))
    yield cfg
    store.set_root(None)


def test_eval_takes_an_imported_split_and_ids(imported) -> None:
    assert _task_ids(imported, None, None) == ["mydocs-0", "mydocs-1", "mydocs-2"]
    assert _task_ids(imported, None, 2) == ["mydocs-0", "mydocs-1"]
    assert _task_ids(imported, "mydocs-2,needle-1k-s1000000", None) == ["mydocs-2", "needle-1k-s1000000"]
    with pytest.raises(typer.Exit):
        _task_ids(imported, "mydocs-7", None)


def test_a_train_only_source_is_not_evaluated(imported, tmp_path) -> None:
    imported.tasks.sources = [TaskSource(name="mydocs", kind="jsonl", path=str(tmp_path / "docs.jsonl"), roles=["train"])]
    with pytest.raises(typer.Exit):
        _task_ids(imported, None, None)


def test_metrics_bucket_imported_lengths_by_scale(imported) -> None:
    rows = [episode_row(episode(f"mydocs-{i}", "correct")) for i in range(3)]
    assert [(r["family"], r["length"]) for r in rows] == [("mydocs", 4096), ("mydocs", 65536), ("mydocs", 131072)]
    s = summarize(rows, max_model_len=4096)
    assert [b["bucket"] for b in s["by_length"]] == ["4k", "64k", "128k"] and s["by_family"]["mydocs"]["n"] == 3
