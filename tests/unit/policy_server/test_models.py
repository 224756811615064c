"""Model resolution: embedded/tiny under $FATHOM_HOME, local dirs, Hub ids via a local Hub cache."""

from __future__ import annotations

import json

import pytest

from fathom.config.model import ModelConfig
from fathom.policy_server.models import (
    MANIFEST,
    ModelError,
    dir_checksum,
    embedded_gguf,
    is_prepared,
    qwen25_chat_template,
    resolve_model,
)


def test_embedded_gguf_is_found_in_the_installed_package():
    path = embedded_gguf()
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000


def test_trl_ships_the_qwen_template():
    tpl = qwen25_chat_template()
    assert "<|im_start|>" in tpl and "<|im_end|>" in tpl


@pytest.mark.parametrize(("name", "cmd"), [("embedded", "fathom model prepare"), ("tiny", "fathom model tiny")])
def test_unprepared_builtin_models_say_what_to_run(monkeypatch, tmp_path, name, cmd):
    monkeypatch.setenv("FATHOM_HOME", str(tmp_path))
    with pytest.raises(ModelError, match=cmd):
        resolve_model(ModelConfig(name=name))


def test_local_directory_without_config_is_rejected(tmp_path):
    with pytest.raises(ModelError, match="no config.json"):
        resolve_model(ModelConfig(name=str(tmp_path)))


def test_local_directory_resolves(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(ModelConfig(name=str(tmp_path))) == str(tmp_path.resolve())


def _fake_hub_cache(root, repo="org/model", rev="a" * 40):
    """The on-disk layout huggingface_hub uses for a downloaded repo."""
    base = root / f"models--{repo.replace('/', '--')}"
    snap = base / "snapshots" / rev
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(rev)
    return snap


def test_hub_id_resolves_through_the_local_hub_cache(monkeypatch, tmp_path):
    snap = _fake_hub_cache(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    got = resolve_model(ModelConfig(name="org/model"), local_only=True)
    assert got == str(snap)


def test_uncached_hub_id_says_how_to_get_it(monkeypatch, tmp_path):
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelError, match="not in the local cache"):
        resolve_model(ModelConfig(name="org/absent"), local_only=True)


def test_checksum_detects_a_changed_file(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"abc")
    (tmp_path / MANIFEST).write_text(json.dumps({"checksum": dir_checksum(tmp_path)}))
    assert is_prepared(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"abd")
    assert not is_prepared(tmp_path)
