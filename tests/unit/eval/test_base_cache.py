"""The base stage's cached evaluation: what its key depends on, storing and restoring, and `fathom eval stages`
reusing it (stage scoring replaced by a recorder; the cache, config and command are the real ones)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fathom.config import FathomConfig
from fathom.entrypoints import stages_cmd
from fathom.entrypoints.cli import app
from fathom.eval import base_cache
from fathom.eval.base_cache import BaseCache, cache_key, harness_fingerprint, key_parts

IDS = ["needle-2k-s2000001", "kv_chain-16k-s2000002"]


def _model(tmp_path: Path, checksum: str = "abc") -> Path:
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    (d / "fathom_model.json").write_text(json.dumps({"kind": "embedded", "checksum": checksum}))
    return d


def _key(cfg: FathomConfig, model: Path, ids=IDS, **kw) -> str:
    serving = {"served_dtype": "float32", "device": "cpu", "reload": True} | kw
    return cache_key(key_parts(cfg, model, ids, **serving))


def test_the_key_changes_with_every_input_and_not_with_addresses(tmp_path: Path) -> None:
    model, cfg = _model(tmp_path), FathomConfig()
    key = _key(cfg, model)
    assert _key(FathomConfig(), model) == key  # the same inputs, the same key
    moved = FathomConfig()
    moved.env_server.port, moved.env_server.max_concurrent_envs = 9999, 3
    assert _key(moved, model) == key
    changed = []
    for section, field, value in (("env_server", "max_turns", 5), ("env_server", "preview_chars", 10),
                                  ("eval", "temperature", 0.7), ("eval", "max_depth", 1), ("model", "max_model_len", 2048),
                                  ("policy_server", "seed", 5), ("sandbox", "output_cap_chars", 123)):
        c = FathomConfig()
        if not hasattr(getattr(c, section), field):
            pytest.fail(f"{section}.{field} is not a setting: update this test")
        setattr(getattr(c, section), field, value)
        changed.append(_key(c, model))
    changed += [_key(cfg, model, ids=IDS[:1]), _key(cfg, model, ids=IDS[::-1]), _key(cfg, _model(tmp_path, "def")),
                _key(cfg, model, served_dtype="bfloat16"), _key(cfg, model, reload=False)]
    assert key not in changed and len(set(changed)) == len(changed)


def test_the_harness_hash_covers_the_episode_code(tmp_path: Path) -> None:
    root = tmp_path / "fathom"
    (root / "env_server").mkdir(parents=True)
    (root / "env_server" / "harness.py").write_text("A = 1\n")
    (root / "trainer").mkdir()
    (root / "trainer" / "grpo.py").write_text("B = 1\n")
    (root / "protocol.py").write_text("C = 1\n")
    before = harness_fingerprint(root)
    (root / "trainer" / "grpo.py").write_text("B = 2\n")  # training code shapes no base episode
    assert harness_fingerprint(root) == before
    for f in (root / "env_server" / "harness.py", root / "protocol.py"):
        f.write_text(f.read_text() + "# changed\n")
        assert harness_fingerprint(root) != before
        before = harness_fingerprint(root)


def _stage_dir(tmp_path: Path, name: str = "scored") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "results.json").write_text(json.dumps({"models": {"base": {"summary": {"n": 2}, "rows": []}}}))
    (d / "report.html").write_text("<html></html>")
    return d


def test_store_then_restore_copies_the_stage_and_keeps_the_first_entry(tmp_path: Path) -> None:
    entry = BaseCache("k1", {"tasks": "x"}, home=tmp_path / "home")
    assert entry.restore(tmp_path / "out") is None and not (tmp_path / "out").exists()
    stored = entry.store(_stage_dir(tmp_path))
    assert stored == tmp_path / "home" / "eval_cache" / "base" / "k1"
    assert json.loads((stored / "key.json").read_text()) == {"key": "k1", "parts": {"tasks": "x"}}
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.txt").write_text("from an earlier run")
    results = entry.restore(out)
    assert results["models"]["base"]["summary"] == {"n": 2}
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "results.json"]
    other = _stage_dir(tmp_path, "rescored")
    (other / "results.json").write_text(json.dumps({"models": {"base": {"summary": {"n": 99}, "rows": []}}}))
    entry.store(other)  # a concurrent run's copy never replaces a complete entry
    assert json.loads((stored / "results.json").read_text())["models"]["base"]["summary"] == {"n": 2}


def test_a_failed_store_leaves_no_entry_and_no_temporary_folder(tmp_path: Path) -> None:
    entry = BaseCache("k2", {}, home=tmp_path / "home")
    with pytest.raises(OSError):
        entry.store(tmp_path / "missing")
    assert list((tmp_path / "home" / "eval_cache" / "base").iterdir()) == []


def test_imported_tasks_are_never_cached(tmp_path: Path) -> None:
    kw = {"served_dtype": "float32", "device": "cpu", "reload": True}
    assert BaseCache.for_stage(FathomConfig(), _model(tmp_path), ["mydocs-3"], **kw) is None
    assert BaseCache.for_stage(FathomConfig(), _model(tmp_path), IDS, **kw) is not None


def test_eval_stages_scores_the_base_once_and_then_reuses_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FATHOM_HOME", str(tmp_path / "home"))
    model = _model(tmp_path)
    monkeypatch.setattr("fathom.policy_server.models.resolve_model", lambda cfg, **kw: str(model))
    monkeypatch.setattr("fathom.policy_server.launch.dev_mode", lambda ps: False)
    monkeypatch.setattr("fathom.policy_server.launch.detect_device", lambda setting: "cpu")
    scored: list[str] = []

    def score(cfg, label, adapter, stage_ids, out, *, model_dir, reload):
        scored.append(label)
        rows = [{"task_id": t, "correct": label != "base", "scorable": True} for t in stage_ids]
        entry = {"summary": {"pass@1": {"pass@1": 0.0 if label == "base" else 1.0, "ci": [0, 1], "n": len(rows)},
                             "unscorable": 0, "n": len(rows), "tokens": {"mean_total": 1.0}, "by_family": {}},
                 "rows": rows}
        (out / label).mkdir(parents=True, exist_ok=True)
        (out / label / "results.json").write_text(json.dumps({"models": {label: entry}}))
        return entry

    monkeypatch.setattr(stages_cmd, "_score", score)
    (tmp_path / "sft").mkdir()
    args = ["eval", "stages", "--stage", "base", "--stage", f"sft={tmp_path / 'sft'}", "--split", "test",
            "--eval.n_tasks", "6", "--eval.bootstrap", "100"]

    def run(out: str, *extra: str) -> dict:
        r = CliRunner().invoke(app, [*args, "--out", str(tmp_path / out), *extra])
        assert r.exit_code == 0, r.output
        return json.loads((tmp_path / out / "summary.json").read_text())

    first = run("a")
    assert scored == ["base", "sft"] and first["base_cache"]["hit"] is False
    second = run("b")
    assert scored == ["base", "sft", "sft"], "the second run scored the base again"
    assert second["base_cache"] == first["base_cache"] | {"hit": True}
    assert second["stages"]["base"] == first["stages"]["base"] and second["paired"] == first["paired"]
    assert (tmp_path / "b" / "base" / "results.json").is_file()
    run("c", "--env_server.max_turns", "5")  # another setting: another key, scored and stored
    assert scored[-2:] == ["base", "sft"]
    run("d", "--eval.base_cache", "false")
    assert scored[-2:] == ["base", "sft"]
    assert "base_cache" not in json.loads((tmp_path / "d" / "summary.json").read_text())
    assert len(list(base_cache.cache_root().iterdir())) == 2
