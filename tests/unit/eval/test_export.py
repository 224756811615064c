"""`fathom export`: which checkpoint, what the directory holds, and the model card's eval tables."""

from __future__ import annotations

import json

import pytest

from fathom.eval.export import ExportError, export
from fathom.eval.report import write_outputs
from tests.unit.eval.test_report import results_and_episodes
from tests.unit.eval.test_watch import write_adapter


def test_export_newest_complete_checkpoint_with_eval_results(tmp_path):
    run = tmp_path / "myrun"
    write_adapter(run / "checkpoints" / "checkpoint-2")
    write_adapter(run / "checkpoints" / "checkpoint-9")
    write_adapter(run / "checkpoints" / "checkpoint-12", truncate=7)  # still uploading: not exported
    res, eps = results_and_episodes()
    write_outputs(res, eps, run / "eval" / "test")
    write_outputs(res, eps, run / "eval" / "checkpoint-9")  # the watcher's: summarized, not copied
    (run / "eval" / "summary.json").write_text(json.dumps({"checkpoints": [
        {"step": 2, "pass@1": 0.25, "mean_tokens": 900.0}, {"step": 9, "pass@1": 0.5, "mean_tokens": 700.0}]}))
    out = export(run)
    assert out == run / "export"
    assert (out / "adapter_model.safetensors").read_bytes() == (run / "checkpoints/checkpoint-9/adapter_model.safetensors").read_bytes()
    card = (out / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: peft") and "checkpoint 9" in card
    assert "--lora-modules fathom=" in card and "PeftModel.from_pretrained" in card
    assert "| base | 0.333 |" in card and "only adapter 1" in card and "| 9 | 0.5 | 700 |" in card
    assert (out / "eval" / "test" / "report.html").is_file() and (out / "eval" / "test" / "pareto.png").is_file()
    assert not (out / "eval" / "checkpoint-9").exists() and card.count("### ") == 2


def test_export_step_and_errors(tmp_path):
    run = tmp_path / "r"
    write_adapter(run / "checkpoints" / "checkpoint-3")
    assert (export(run, tmp_path / "o", step=3) / "adapter_config.json").is_file()
    with pytest.raises(ExportError, match="no complete checkpoint-4/"):
        export(run, tmp_path / "o", step=4)
    with pytest.raises(ExportError, match="has no complete checkpoint"):
        (tmp_path / "empty").mkdir()
        export(tmp_path / "empty")
    with pytest.raises(ExportError, match="does not exist"):
        export(tmp_path / "nope")
