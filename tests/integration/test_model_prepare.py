"""`fathom model tiny` / `prepare` through the CLI: idempotent, checksum recorded."""

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


def test_tiny_is_idempotent_and_records_a_checksum(tmp_path):
    first = _run(["model", "tiny"], tmp_path)
    assert first.returncode == 0, first.stderr
    d = Path(first.stdout.strip().splitlines()[-1])
    manifest = json.loads((d / "fathom_model.json").read_text())
    assert len(manifest["checksum"]) == 64
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 2 and cfg["hidden_size"] <= 128
    mtime = (d / "model.safetensors").stat().st_mtime_ns
    second = _run(["model", "tiny"], tmp_path)
    assert second.returncode == 0 and (d / "model.safetensors").stat().st_mtime_ns == mtime
    # A corrupted copy is detected and rebuilt.
    (d / "model.safetensors").write_bytes(b"garbage")
    third = _run(["model", "tiny"], tmp_path)
    assert third.returncode == 0 and json.loads((d / "fathom_model.json").read_text())["checksum"] == manifest["checksum"]
    assert _run(["model", "path", "tiny"], tmp_path).stdout.strip() == str(d)


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
