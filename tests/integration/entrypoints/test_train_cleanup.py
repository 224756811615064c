"""A standalone `fathom train` removes its tmpfs merged weights when it stops; under `fathom launch`
(`--keep-merged`) it leaves them for the launcher, whose eval-stage vLLM restart reloads them."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fathom.config import load_config
from fathom.entrypoints.cli import app
from fathom.trainer import merged_dir

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("keep", [False, True])
def test_train_removes_its_tmpfs_folder_unless_told_to_keep_it(tmp_path, monkeypatch, keep):
    monkeypatch.setattr(merged_dir, "SHM", tmp_path / "shm")
    args = ["--output_dir", str(tmp_path / "runs"), "--model.name", str(tmp_path / "no-model")]
    cfg = load_config(ROOT / "configs/smoke.toml", args)
    folder = merged_dir.tmpfs_dir(cfg.run_dir, cfg.run_name)
    (folder / "merged-1-000001").mkdir(parents=True)  # what an earlier sync of this run left
    # the model is missing, so the command stops early; the folder goes with it all the same
    result = CliRunner().invoke(app, ["train", "-c", str(ROOT / "configs/smoke.toml"), *args,
                                      *(["--keep-merged"] if keep else [])])
    assert result.exit_code != 0 and "no-model" in result.output
    assert folder.exists() is keep


def test_train_gives_back_the_sigterm_handler_it_replaced(tmp_path, monkeypatch):
    import signal

    monkeypatch.setattr(merged_dir, "SHM", tmp_path / "shm")
    before = signal.getsignal(signal.SIGTERM)
    CliRunner().invoke(app, ["train", "-c", str(ROOT / "configs/smoke.toml"), "--output_dir", str(tmp_path),
                             "--model.name", str(tmp_path / "no-model")])
    assert signal.getsignal(signal.SIGTERM) is before
