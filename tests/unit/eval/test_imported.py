"""Evaluating an imported split: ids resolve from the store's manifest (no context read), rows group by scale."""

from __future__ import annotations

import json

import pytest

from fathom.config import load_config
from fathom.config.tasks import TaskSource
from fathom.eval.run import EvalInputError
from fathom.eval.run import task_ids as _task_ids
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
    with pytest.raises(EvalInputError, match="--tasks"):
        _task_ids(imported, "mydocs-7", None)


def test_a_train_only_source_is_not_evaluated(imported, tmp_path) -> None:
    imported.tasks.sources = [TaskSource(name="mydocs", kind="jsonl", path=str(tmp_path / "docs.jsonl"), roles=["train"])]
    with pytest.raises(EvalInputError, match="roles"):
        _task_ids(imported, None, None)


def test_metrics_bucket_imported_lengths_by_scale(imported) -> None:
    rows = [episode_row(episode(f"mydocs-{i}", "correct")) for i in range(3)]
    assert [(r["family"], r["length"]) for r in rows] == [("mydocs", 4096), ("mydocs", 65536), ("mydocs", 131072)]
    s = summarize(rows, max_model_len=4096)
    assert [b["bucket"] for b in s["by_length"]] == ["4k", "64k", "128k"] and s["by_family"]["mydocs"]["n"] == 3


def test_watch_and_launch_take_imported_splits(imported, tmp_path) -> None:
    from typer.testing import CliRunner

    from fathom.entrypoints.cli import app

    runner = CliRunner()
    store_dir = str(tmp_path / "store")
    r = runner.invoke(app, ["eval", "watch", "--checkpoints", str(tmp_path / "run"), "--split", "mydocs", "--dry-run",
                            "--tasks.store_dir", store_dir])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)
    assert (plan["split"], plan["tasks"]) == ("mydocs", 3)
    cfg = tmp_path / "launch.toml"
    cfg.write_text(f'[tasks]\nstore_dir = "{store_dir}"\n\n[[tasks.sources]]\nname = "mydocs"\nkind = "jsonl"\n'
                   f'path = "{tmp_path / "docs.jsonl"}"\n\n[[tasks.sources]]\nname = "later"\nkind = "csv"\n'
                   'path = "later.csv"\n')
    r = runner.invoke(app, ["launch", str(cfg), "--dry-run"])
    assert r.exit_code == 2 and "later are configured but not imported" in r.output
    assert f"fathom tasks import later -c {cfg}" in r.output


def test_the_demo_page_offers_eval_role_rows(imported, tmp_path) -> None:
    from fathom.ui.live import EXAMPLE_TASKS, example_tasks

    src = TaskSource(name="mydocs", kind="jsonl", path=str(tmp_path / "docs.jsonl"))
    assert example_tasks(None) == list(EXAMPLE_TASKS)
    imported.tasks.sources = [src, src.model_copy(update={"name": "notimported"})]
    assert example_tasks(imported.tasks)[-3:] == ["mydocs-0", "mydocs-1", "mydocs-2"]
    imported.tasks.sources = [src.model_copy(update={"roles": ["train"]})]
    assert example_tasks(imported.tasks) == list(EXAMPLE_TASKS)
