"""`fathom model tiny` / `prepare` through the CLI: idempotent, checksum recorded.

The idempotent rerun of `model tiny` runs as its own process, as a user runs it (it finds the model prepared before
it imports torch); the builds go through the same Typer app in-process (CliRunner, with $FATHOM_HOME set the same
way), where torch's and transformers' imports, about 5 s a process on 2 cores, are already paid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FATHOM = [sys.executable, "-m", "fathom.entrypoints.cli"]


def _run(args, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "FATHOM_HOME": str(home)}
    return subprocess.run(FATHOM + args, capture_output=True, text=True, env=env, timeout=600)


def _run_here(args, home: Path, monkeypatch: pytest.MonkeyPatch):
    """The same command in this process; returns CliRunner's result (exit_code, stdout, stderr)."""
    from typer.testing import CliRunner

    from fathom.entrypoints.cli import app

    monkeypatch.setenv("FATHOM_HOME", str(home))
    return CliRunner().invoke(app, args)


def test_tiny_is_idempotent_and_records_a_checksum(tmp_path, monkeypatch):
    first = _run_here(["model", "tiny"], tmp_path, monkeypatch)
    assert first.exit_code == 0, first.output
    d = Path(first.stdout.strip().splitlines()[-1])
    assert d == tmp_path / "models" / "tiny-random"
    manifest = json.loads((d / "fathom_model.json").read_text())
    assert len(manifest["checksum"]) == 64
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 2 and cfg["hidden_size"] <= 128
    mtime = (d / "model.safetensors").stat().st_mtime_ns
    second = _run(["model", "tiny"], tmp_path)
    assert second.returncode == 0, second.stderr
    assert Path(second.stdout.strip().splitlines()[-1]) == d and (d / "model.safetensors").stat().st_mtime_ns == mtime
    # A corrupted copy is detected and rebuilt.
    (d / "model.safetensors").write_bytes(b"garbage")
    third = _run_here(["model", "tiny"], tmp_path, monkeypatch)
    assert third.exit_code == 0, third.output
    assert (d / "model.safetensors").read_bytes() != b"garbage"
    assert json.loads((d / "fathom_model.json").read_text())["checksum"] == manifest["checksum"]
    assert _run_here(["model", "path", "tiny"], tmp_path, monkeypatch).stdout.strip() == str(d)


def test_model_path_for_unprepared_embedded_says_what_to_run(tmp_path):
    out = _run(["model", "path", "embedded"], tmp_path)
    assert out.returncode != 0 and "fathom model prepare" in out.stderr


@pytest.mark.slow
def test_embedded_prepare_is_idempotent(tmp_path):
    first = _run(["model", "prepare"], tmp_path)
    assert first.returncode == 0, first.stderr
    d = Path(first.stdout.strip().splitlines()[-1])
    cfg = json.loads((d / "config.json").read_text())
    assert "quantization_config" not in cfg, "vLLM would try to load a GGUF"
    mtime = (d / "model.safetensors").stat().st_mtime_ns
    assert _run(["model", "prepare"], tmp_path).returncode == 0
    assert (d / "model.safetensors").stat().st_mtime_ns == mtime
