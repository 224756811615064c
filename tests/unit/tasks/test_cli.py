"""`fathom tasks build|show|stats|verify` through the real CLI app."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from fathom.entrypoints.cli import app

runner = CliRunner()


def test_show_prints_task_and_gold() -> None:
    r = runner.invoke(app, ["tasks", "show", "needle-4k-s1000002", "--chars", "50"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["id"] == "needle-4k-s1000002" and len(d["context"]) == 50 and d["gold"]["type"] == "number"
    r = runner.invoke(app, ["tasks", "show", "needle-4k-s1000002", "--no-gold"])
    assert "gold" not in json.loads(r.output)


def test_show_unknown_id_fails_clearly() -> None:
    r = runner.invoke(app, ["tasks", "show", "bogus"])
    assert r.exit_code == 2 and "unknown task id" in r.output


def test_build_stats_verify_in_a_directory(tmp_path) -> None:
    r = runner.invoke(app, ["tasks", "build", "--split", "test", "--n", "10", "--dir", str(tmp_path), "--verify"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "test.json").is_file()
    r = runner.invoke(app, ["tasks", "stats", "--split", "test", "--dir", str(tmp_path)])
    s = json.loads(r.output)["test"]
    assert s["n"] == 10 and sum(s["by_family"].values()) == 10 and len(s["by_family"]) == 5
    r = runner.invoke(app, ["tasks", "verify", "--split", "test", "--dir", str(tmp_path)])
    assert r.exit_code == 0 and json.loads(r.output)["checked"] == 10


def test_bad_split_fails_clearly(tmp_path) -> None:
    r = runner.invoke(app, ["tasks", "build", "--split", "dev", "--dir", str(tmp_path)])
    assert r.exit_code == 2 and "unknown" in r.output
    r = runner.invoke(app, ["tasks", "stats", "--split", "test", "--dir", str(tmp_path)])
    assert r.exit_code == 2 and "fathom tasks build" in r.output


def test_import_show_verify_stats_and_refusal(tmp_path, monkeypatch) -> None:
    from fathom.tasks import store

    monkeypatch.setenv("FATHOM_HOME", str(tmp_path / "home"))
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"id": f"r{i}", "q": f"Which code? {i}", "doc": f"the code is {i}. " * 30,
                                       "a": str(i)}) + "\n" for i in range(3)))
    fields = ["--field", "question=q", "--field", "context=doc", "--field", "answer=a"]
    try:
        r = runner.invoke(app, ["tasks", "import", str(src), "--name", "mydocs", "--no-progress", *fields])
        assert r.exit_code == 0, r.output
        assert json.loads(r.output)["n"] == 3
        assert (tmp_path / "home" / "tasks" / "splits" / "mydocs.json").is_file()
        d = json.loads(runner.invoke(app, ["tasks", "show", "mydocs-1", "--chars", "11"]).output)
        assert d["context"] == "the code is" and d["gold"]["answer"] == "1" and d["metadata"]["extra"]["source_id"] == "r1"
        assert json.loads(runner.invoke(app, ["tasks", "verify", "--split", "mydocs"]).output)["checked"] == 3
        assert json.loads(runner.invoke(app, ["tasks", "stats", "--split", "mydocs"]).output)["mydocs"]["n"] == 3
        src.write_text(src.read_text().replace('"a": "2"', '"a": "7"'))
        r = runner.invoke(app, ["tasks", "import", str(src), "--name", "mydocs", "--no-progress", *fields])
        assert r.exit_code == 2 and "changes pinned task mydocs-2" in r.output and "--force" in r.output
        r = runner.invoke(app, ["tasks", "import", str(src), "--name", "mydocs", "--no-progress", "--force", *fields])
        assert r.exit_code == 0, r.output
        r = runner.invoke(app, ["tasks", "import", str(src), "--name", "x", "--field", "question"])
        assert r.exit_code == 2 and "OURS=THEIRS" in r.output
    finally:
        store.set_root(None)
