"""`fathom serve ADAPTER_OR_RUN`: which adapter and base it serves, and the vLLM command it builds (KV cache
bounded on CPU, the adapter under its name, dev mode off), without starting vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer

from fathom.entrypoints.policy_cmd import adapter_serve_config
from fathom.eval.export import export
from fathom.policy_server.launch import build_command
from tests.unit.eval.test_watch import write_adapter


def _run(tmp_path: Path, model: dict | None = None) -> Path:
    run = tmp_path / "myrun"
    write_adapter(run / "checkpoints" / "checkpoint-2")
    write_adapter(run / "checkpoints" / "checkpoint-5")
    (run / "config.resolved.json").write_text(json.dumps({"model": model or {
        "name": "embedded", "dtype": "float32", "revision": None, "max_model_len": 4096}}))
    return run


def test_a_run_dir_serves_its_newest_checkpoint_on_the_runs_base_with_a_bounded_kv_cache(tmp_path):
    run = _run(tmp_path)
    cfg, src, model = adapter_serve_config(str(run), "fathom", None, [])
    assert src == run / "checkpoints" / "checkpoint-5" and model["name"] == "embedded"
    ps = cfg.policy_server
    assert ps.lora_modules == [f"fathom={src.resolve()}"] and ps.served_model_name == "embedded"
    argv, env = build_command(ps.model_copy(update={"device": "cpu"}), cfg.model, "/models/base")
    i = argv.index("--lora-modules")
    assert argv[i + 1] == f"fathom={src.resolve()}" and "--enable-lora" in argv
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "4"  # vLLM-CPU's own default grows to fill the machine
    assert "VLLM_SERVER_DEV_MODE" not in env  # no /collective_rpc on a server for people
    assert cfg.run_dir.name == "serve"  # its logs and resolved config never overwrite the run's


def test_an_export_is_preferred_and_settings_on_the_command_line_win(tmp_path):
    run = _run(tmp_path, {"name": "HuggingFaceTB/SmolLM2-360M-Instruct", "dtype": "bfloat16", "max_model_len": 2048})
    export(run)
    (run / "config.resolved.json").unlink()  # the export's fathom.json alone names the base
    cfg, src, model = adapter_serve_config(str(run), "mine", None, ["--policy_server.cpu_kvcache_gb", "2",
                                                                    "--policy_server.port", "8123"])
    assert src == run / "export" and model["name"] == "HuggingFaceTB/SmolLM2-360M-Instruct"
    assert (cfg.model.dtype, cfg.model.max_model_len) == ("bfloat16", 2048)
    assert cfg.policy_server.lora_modules == [f"mine={(run / 'export').resolve()}"]
    assert (cfg.policy_server.cpu_kvcache_gb, cfg.policy_server.port) == (2, 8123)


def test_bad_input_is_named(tmp_path, capsys):
    for bad in (tmp_path / "nope", tmp_path):
        with pytest.raises(typer.Exit):
            adapter_serve_config(str(bad), "fathom", None, [])
    err = capsys.readouterr().err
    assert "is no directory" in err and "has no complete checkpoint" in err
    with pytest.raises(typer.Exit):
        adapter_serve_config(str(_run(tmp_path)), "fathom", None, ["--policy_server.enable_lora", "false"])
    assert "lora_modules names adapters but policy_server.enable_lora is false" in capsys.readouterr().err
