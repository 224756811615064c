"""The imported task store: JSONL, Parquet, CSV and Hub-layout sources pinned, served, refused when changed."""

from __future__ import annotations

import csv
import hashlib
import json
import os
from pathlib import Path

import pytest

from fathom.config.tasks import RewardConfig, TaskSource, TasksConfig
from fathom.rollout_worker.dataset import mix, training_task_ids
from fathom.tasks import describe, get_task, load_split, store
from fathom.tasks.reward import match
from fathom.tasks.sources import PRESETS, SourceError, source_from_spec
from fathom.tasks.splits import ManifestError


@pytest.fixture(autouse=True)
def tmp_store(tmp_path):
    store.set_root(tmp_path / "store")
    yield tmp_path / "store"
    store.set_root(None)


def rows(n: int = 4, start: int = 0) -> list[dict]:
    return [{"question": f"What is the code of item {i}?", "context": f"filler {i} " * (50 + i) + f"code {1000 + i}.",
             "answer": 1000 + i} for i in range(start, start + n)]


def write_jsonl(path: Path, data: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in data))
    return path


def test_jsonl_import_pins_ids_digests_and_revision(tmp_path, tmp_store) -> None:
    f = write_jsonl(tmp_path / "docs.jsonl", rows())
    out = store.import_source(TaskSource(name="mydocs", kind="jsonl", path=str(f)))
    assert out["n"] == 4 and out["revision"] == "sha256:" + hashlib.sha256(f.read_bytes()).hexdigest()
    assert load_split("mydocs") == ["mydocs-0", "mydocs-1", "mydocs-2", "mydocs-3"]
    m = json.loads((tmp_store / "splits" / "mydocs.json").read_text())
    t = get_task("mydocs-2")
    assert t.context == rows()[2]["context"] and t.gold.answer == "1002" and t.gold.type == "number"
    row = m["tasks"][2]
    assert row["sha256"] == t.digest() and row["context_sha256"] == hashlib.sha256(t.context.encode()).hexdigest()
    assert (tmp_store / "objects" / row["context_sha256"][:2] / row["context_sha256"]).read_text() == t.context
    assert describe("mydocs-2") == ("mydocs", len(t.context))
    with pytest.raises(KeyError, match="rows mydocs-0..mydocs-3"):
        get_task("mydocs-9")


def test_parquet_and_csv_sources_read_through_datasets(tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = rows(3)
    pq.write_table(pa.Table.from_pylist([{"q": r["question"], "doc": r["context"], "a": r["answer"]} for r in data]),
                   tmp_path / "docs.parquet")
    src = TaskSource(name="pq", kind="parquet", path=str(tmp_path / "docs.parquet"),
                     fields={"question": "q", "context": "doc", "answer": "a"})
    assert store.import_source(src)["n"] == 3
    assert get_task("pq-1").context == data[1]["context"]
    with (tmp_path / "docs.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, ["question", "context", "answer", "answer_type"])
        w.writeheader()
        for r in data:
            w.writerow({**r, "answer_type": "string"})
    assert store.import_source(TaskSource(name="csvdocs", kind="csv", path=str(tmp_path / "docs.csv")))["n"] == 3
    t = get_task("csvdocs-2")
    assert t.question == data[2]["question"] and t.gold.type == "string" and t.gold.answer == "1002"


def test_hub_layout_directory_with_a_config_and_a_preset(tmp_path) -> None:
    repo = tmp_path / "longbench-like"
    (repo / "data" / "qa").mkdir(parents=True)
    (repo / "README.md").write_text("---\nconfigs:\n- config_name: qa\n  data_files:\n  - split: test\n"
                                    "    path: data/qa/test.jsonl\n---\n")
    write_jsonl(repo / "data" / "qa" / "test.jsonl", [
        {"_id": "abc", "input": "Who wrote it?", "context": "It was written by Ada Lovelace. " * 20,
         "answers": ["Ada Lovelace", "Lovelace"], "dataset": "qa"}])
    src = TaskSource(name="lb", kind="hub", path=str(repo), config="qa", split="test", preset="longbench")
    out = store.import_source(src)
    assert out["n"] == 1 and out["revision"].startswith("dir-sha256:")
    t = get_task("lb-0")
    assert t.family == "qa" and t.metadata.extra["source_id"] == "abc"
    assert (t.gold.answer, t.gold.aliases, t.gold.type) == ("Ada Lovelace", ["Lovelace"], "string")
    assert match(t.gold, "lovelace", RewardConfig()) == 1.0 and match(t.gold, "Babbage", RewardConfig()) == 0.0
    assert set(PRESETS) >= {"longbench", "babilong"}


def test_reimport_that_changes_or_drops_a_pinned_task_is_refused_unless_forced(tmp_path) -> None:
    f = write_jsonl(tmp_path / "docs.jsonl", rows(3))
    src = TaskSource(name="mydocs", kind="jsonl", path=str(f))
    store.import_source(src)
    write_jsonl(f, rows(5))  # appended rows change no pinned task
    assert store.import_source(src)["n"] == 5
    changed = rows(5)
    changed[1]["answer"] = 9999
    write_jsonl(f, changed)
    with pytest.raises(store.StoreError, match="changes pinned task mydocs-1 .*--force"):
        store.import_source(src)
    assert get_task("mydocs-1").gold.answer == "1001"  # the refused import left the pin alone
    write_jsonl(f, rows(2))
    with pytest.raises(store.StoreError, match="drop mydocs-2..mydocs-4"):
        store.import_source(src)
    write_jsonl(f, changed)
    store.import_source(src, force=True)
    assert get_task("mydocs-1").gold.answer == "9999"


def test_changed_file_on_disk_is_refused_naming_task_and_fix(tmp_path, tmp_store) -> None:
    store.import_source(TaskSource(name="mydocs", kind="jsonl", path=str(write_jsonl(tmp_path / "d.jsonl", rows(2)))))
    sha = json.loads((tmp_store / "splits" / "mydocs.json").read_text())["tasks"][1]["context_sha256"]
    obj = tmp_store / "objects" / sha[:2] / sha
    obj.write_text(obj.read_text().replace("code", "kode"))
    with pytest.raises(store.StoreError, match=r"task mydocs-1: .* changed on disk .*fathom tasks import mydocs --force"):
        get_task("mydocs-1")
    with pytest.raises(store.StoreError, match="mydocs-1"):
        store.verify("mydocs")
    assert get_task("mydocs-0").id == "mydocs-0"  # only the changed task is refused
    obj.unlink()
    with pytest.raises(store.StoreError, match="mydocs-1: .* is missing"):
        get_task("mydocs-1")


def test_bad_rows_name_file_row_field_and_fix(tmp_path) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps(rows(1)[0]) + "\n" + json.dumps({"question": "q", "answer": "a"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl row 1 lacks context; map other column names"):
        store.import_source(TaskSource(name="bad", kind="jsonl", path=str(f)))
    assert not store.has("bad")
    f.write_text('{"question": "q", "context": "c"\n')
    with pytest.raises(SourceError, match=r"bad.jsonl:1 is not valid JSON"):
        store.import_source(TaskSource(name="bad", kind="jsonl", path=str(f)))
    f.write_text(json.dumps({**rows(1)[0], "answer_type": "free-form"}) + "\n")
    with pytest.raises(ValueError, match="needs a judge model"):
        store.import_source(TaskSource(name="bad", kind="jsonl", path=str(f)))
    with pytest.raises(SourceError, match="does not exist"):
        store.import_source(TaskSource(name="bad", kind="jsonl", path=str(tmp_path / "nope.jsonl")))
    with pytest.raises(SourceError, match="preset 'nope' is unknown"):
        store.import_source(TaskSource(name="bad", kind="jsonl", path=str(f), preset="nope"))


def test_names_that_shadow_builtins_are_refused(tmp_path) -> None:
    f = write_jsonl(tmp_path / "d.jsonl", rows(1))
    for bad in ("needle", "test", "a/b"):
        with pytest.raises(ManifestError, match="pass another --name"):
            store.import_source(TaskSource(name="ok", kind="jsonl", path=str(f)), bad)
    with pytest.raises(ManifestError, match="fathom tasks import nothere"):
        load_split("nothere")


def test_training_mix_follows_weights_and_reads_no_context(tmp_path, tmp_store) -> None:
    store.import_source(TaskSource(name="mydocs", kind="jsonl", path=str(write_jsonl(tmp_path / "d.jsonl", rows(40)))))
    for p in (tmp_store / "objects").rglob("*"):
        if p.is_file():
            p.unlink()  # ids come from the manifest alone
    ids = training_task_ids(30, 2**17, imported=[("mydocs", 2.0)], generated_weight=1.0)
    assert len(ids) == 30 and sum(i.startswith("mydocs-") for i in ids) == 20
    assert ids[:3] == ["mydocs-0", ids[1], "mydocs-1"] and not ids[1].startswith("mydocs")
    only = training_task_ids(100, None, imported=[("mydocs", 1.0)], generated_weight=0.0)
    assert only == [f"mydocs-{i}" for i in range(40)]  # each task once, never padded
    assert mix([("a", 1.0, ["a0"]), ("b", 1.0, ["b0", "b1", "b2"])], 10) == ["a0", "b0", "b1", "b2"]
    with pytest.raises(ValueError, match="no task of at most 10 characters"):
        training_task_ids(5, 10, imported=[("mydocs", 1.0)], generated_weight=0.0)


def test_source_specs_and_config(tmp_path) -> None:
    f = write_jsonl(tmp_path / "d.jsonl", rows(1))
    s = source_from_spec(str(f), [], name="x", limit=3)
    assert (s.kind, s.name, s.limit) == ("jsonl", "x", 3)
    cfg = TasksConfig(sources=[{"name": "lb", "kind": "hub", "repo": "THUDM/LongBench", "preset": "longbench",
                                "config": "hotpotqa", "roles": ["eval"]}])
    s = source_from_spec("lb", cfg.sources, split="test", revision="main")
    assert (s.repo, s.config, s.revision, s.roles) == ("THUDM/LongBench", "hotpotqa", "main", ["eval"])
    with pytest.raises(SourceError, match="not a configured tasks.sources name"):
        source_from_spec("nothing.txt", cfg.sources)
    with pytest.raises(ValueError, match="appear more than once"):
        TasksConfig(sources=[{"name": "a", "kind": "jsonl", "path": "x"}] * 2)
    with pytest.raises(ValueError, match="needs path"):
        TaskSource(name="a", kind="csv")
    with pytest.raises(ValueError, match="no tasks.sources entry has the train role"):
        TasksConfig(generated_weight=0)


def test_stored_files_are_readable_by_other_users(tmp_path, tmp_store) -> None:
    store.import_source(TaskSource(name="mydocs", kind="jsonl", path=str(write_jsonl(tmp_path / "d.jsonl", rows(1)))))
    files = [p for p in tmp_store.rglob("*") if p.is_file()]
    umask = os.umask(0)
    os.umask(umask)
    # the mode open() gives (0644 under umask 022), not mkstemp's 0600, which the container's uid 1000 cannot read
    assert len(files) == 2 and all(p.stat().st_mode & 0o777 == 0o666 & ~umask for p in files)
