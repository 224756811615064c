"""Config tree: TOML round trip, dotted overrides, cross-checks that name both fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fathom.config import ConfigError, FathomConfig, load_config, write_resolved
from fathom.config.base import apply_overrides

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = sorted((ROOT / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_validate_and_round_trip(path, tmp_path):
    cfg = load_config(path)
    out = write_resolved(cfg, tmp_path)
    again = FathomConfig.model_validate(json.loads(out.read_text()))
    assert again == cfg


def test_shipped_configs_are_what_the_issue_names():
    smoke = load_config(ROOT / "configs/smoke.toml")
    assert smoke.model.name == "embedded" and smoke.policy_server.device == "cpu"
    prod = load_config(ROOT / "configs/qwen1.5b-a100.toml")
    assert prod.model.name == "Qwen/Qwen2.5-Coder-1.5B-Instruct"
    assert prod.model.dtype == "bfloat16" and prod.trainer.lora.rank == 16


def test_dotted_overrides_both_spellings():
    cfg = load_config(ROOT / "configs/smoke.toml", ["--trainer.learning_rate", "1e-6", "policy_server.port=9000"])
    assert cfg.trainer.learning_rate == 1e-6
    assert cfg.policy_server.port == 9000


def test_override_parses_toml_values_and_keeps_strings():
    out = apply_overrides({}, ["a.b=true", "a.c=[1, 2]", "a.d=hello", "--a.e", '"x y"'])
    assert out == {"a": {"b": True, "c": [1, 2], "d": "hello", "e": "x y"}}


def test_override_without_value_is_an_error():
    with pytest.raises(ConfigError, match="trainer.learning_rate"):
        load_config(None, ["--trainer.learning_rate"])


def test_unknown_key_names_its_location():
    with pytest.raises(ConfigError, match="trainer.learnin_rate"):
        load_config(None, ["--trainer.learnin_rate", "1"])


def test_missing_and_broken_files_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="nope.toml"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\nname=1")
    with pytest.raises(ConfigError, match="bad.toml"):
        load_config(bad)


@pytest.mark.parametrize(
    ("overrides", "fields"),
    [
        (["--server_model.name", "other/model"], ["server_model.name", "model.name"]),
        (["--server_model.name", "embedded", "--server_model.dtype", "bfloat16"], ["server_model.dtype", "model.dtype"]),
        (["--policy_server.enable_lora", "true", "--trainer.lora.rank", "32"],
         ["trainer.lora.rank", "policy_server.max_lora_rank"]),
        (["--policy_server.enable_lora", "true", "--policy_server.weight_sync", "adapter",
          "--policy_server.max_loras", "3", "--trainer.max_staleness", "2"],
         ["policy_server.max_loras", "trainer.max_staleness"]),
        (["--policy_server.weight_sync", "adapter"], ["policy_server.weight_sync", "policy_server.enable_lora"]),
        # NCCL cannot form a group of two ranks on one GPU: both device fields and the fix are named
        (["--policy_server.device", "cuda", "--policy_server.weight_sync", "merged", "--policy_server.merged_sync",
          "nccl"], ["policy_server.cuda_device", "trainer.cuda_device", "merged_sync = 'disk'"]),
        (["--policy_server.device", "cpu", "--policy_server.weight_sync", "merged", "--policy_server.merged_sync",
          "nccl"], ["policy_server.merged_sync", "policy_server.device", "'disk'"]),
        (["--policy_server.cpu_cores", "0-1", "--trainer.cpu_cores", "1"],
         ["trainer.cpu_cores", "policy_server.cpu_cores", "[1]"]),
        (["--trainer.cpu_cores", "1-"], ["trainer.cpu_cores", "'1-'"]),
        (["--policy_server.cpu_cores", "3-1"], ["policy_server.cpu_cores", "backwards"]),
    ],
)
def test_cross_checks_reject_bad_combinations_naming_both_fields(overrides, fields):
    with pytest.raises(ConfigError) as exc:
        load_config(ROOT / "configs/smoke.toml", overrides)
    for field in fields:
        assert field in str(exc.value)


def test_cross_checks_accept_the_boundary():
    cfg = load_config(None, ["--policy_server.max_loras", "4", "--trainer.max_staleness", "2", "--trainer.lora.rank", "16"])
    assert cfg.policy_server.max_loras == 4


def test_every_field_is_documented():
    missing = []

    def walk(model_cls, prefix):
        for name, field in model_cls.model_fields.items():
            if not field.description:
                missing.append(prefix + name)
            ann = field.annotation
            if isinstance(ann, type) and hasattr(ann, "model_fields"):
                walk(ann, f"{prefix}{name}.")

    walk(FathomConfig, "")
    assert missing == []


def test_both_shipped_configs_sync_merged_weights():
    for name in ("smoke.toml", "qwen1.5b-a100.toml"):
        assert load_config(ROOT / "configs" / name).policy_server.weight_sync == "merged"
    prod = load_config(ROOT / "configs/qwen1.5b-a100.toml").trainer
    assert (prod.lora.rank, prod.lora.alpha, prod.num_generations, prod.max_staleness, prod.temperature) == (16, 32, 8, 4, 1.0)
    assert set(prod.lora.target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def test_cpu_lists_parse_like_vllms():
    from fathom.config.cpus import parse_cpu_list

    assert parse_cpu_list("5,2-4") == [2, 3, 4, 5]
    assert parse_cpu_list("1") == [1]
    cfg = load_config(None, ["--policy_server.cpu_cores", "nobind", "--trainer.cpu_cores", "0"])
    assert cfg.trainer.cpu_cores == "0"


def test_merged_sync_auto_is_disk_on_one_gpu_and_nccl_on_two():
    from fathom.config import merged_backend

    one = load_config(ROOT / "configs/qwen1.5b-a100.toml", ["--policy_server.merged_sync", "auto"])
    assert merged_backend(one) == "disk"
    two = load_config(ROOT / "configs/qwen1.5b-a100.toml", ["--policy_server.merged_sync", "auto",
                                                            "--trainer.cuda_device", "1"])
    assert merged_backend(two) == "nccl"
    assert merged_backend(load_config(ROOT / "configs/smoke.toml")) == "disk"
    assert merged_backend(load_config(None, ["--policy_server.weight_sync", "adapter"])) is None
    assert load_config(ROOT / "configs/qwen1.5b-a100.toml").policy_server.merged_sync == "disk"
