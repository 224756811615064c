"""The one-GPU merged sync end to end on CPU: TRL 1.15's own `_sync_weight_merged` drives `DiskMergedSync` against a
fake vLLM and proxy over real HTTP, with a tiny PEFT model (tied embeddings) in place of the 1.5B one.

Pins TRL's private sync path (pause -> merge -> send_weights -> unmerge -> resume -> version + 1) and
`_iter_vllm_named_params` (the weight manifest): a TRL that changes either fails here, not on a GPU an hour in.
"""

from __future__ import annotations

import copy
import time
from types import SimpleNamespace

import pytest
import torch

from fathom.trainer.weight_sync import DiskMergedSync, WeightSyncError
from tests.integration.trainer.fake_vllm import FakeVllm

pytest.importorskip("peft")


def tiny_peft():
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    base = LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                        tie_word_embeddings=True))
    # init_lora_weights=False: B is random, not zero, so merging moves the base weights (as after training steps)
    lora = LoraConfig(r=4, lora_alpha=8, init_lora_weights=False, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    return get_peft_model(base, lora)


class Worker:
    def __init__(self):
        self.versions: list[int] = []

    def update_model_version(self, v: int) -> None:
        self.versions.append(v)


def trl_trainer(model, transfer):
    """The attributes TRL's `_sync_weight_merged` and `_streaming_iter` read, on one CPU process."""
    from accelerate import PartialState
    from trl.experimental.async_grpo.async_grpo_trainer import AsyncGRPOTrainer

    PartialState(cpu=True)  # TRL's logger needs accelerate's state; one CPU process, no distributed group
    acc = SimpleNamespace(unwrap_model=lambda m: m, is_main_process=True, wait_for_everyone=lambda: None,
                          device=torch.device("cpu"))
    t = SimpleNamespace(accelerator=acc, model=model, weight_transfer=transfer, model_version=0,
                        rollout_worker=Worker())
    t._streaming_iter = lambda: AsyncGRPOTrainer._streaming_iter(t)
    t.sync = lambda: AsyncGRPOTrainer._sync_weight_merged(t, time.time())
    return t


def base_weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters() if "lora_" not in k}


def test_manifest_of_a_tiny_peft_model_is_the_base_checkpoints_names():
    from trl.experimental.async_grpo.async_grpo_trainer import _iter_vllm_named_params

    model = tiny_peft()
    names = [n for n, _ in _iter_vllm_named_params(model)]
    assert not [n for n in names if "lora_" in n or "base_layer" in n or n.startswith("base_model.")]
    assert names.count("model.embed_tokens.weight") == 1
    assert "lm_head.weight" not in names  # tied: vLLM's loader ties lm_head to the embedding
    plain = dict(model.get_base_model().named_parameters())  # de-duplicates the tied tensor, like a checkpoint
    assert set(names) == {n.replace(".base_layer", "") for n in plain if "lora_" not in n}


def test_one_sync_pauses_reloads_resumes_then_bumps_the_version(tmp_path):
    model = tiny_peft()
    before = base_weights(model)
    expected = dict(copy.deepcopy(model).merge_and_unload().named_parameters())
    with FakeVllm() as fake:
        sync = DiskMergedSync(directory=tmp_path / "merged", vllm_url=fake.url, proxy_url=fake.url,
                              state_path=tmp_path / "policy_state.json")
        trainer = trl_trainer(model, sync)
        sync.bind(trainer).init_weight_transfer()
        trainer.sync()
        assert fake.paths() == ["/policy", "/pause", "/collective_rpc", "/reset_prefix_cache", "/policy/version",
                                "/resume"]
        assert fake.calls[1][1] == {"mode": "keep"} and fake.calls[2][1]["method"] == "reload_weights"
        assert fake.calls[4][1] == {"version": 1} and trainer.model_version == 1
        assert trainer.rollout_worker.versions == [1]
        # vLLM read the merged weights, bit for bit, under the base checkpoint's names
        assert set(fake.loaded) == {n for n in expected if n != "lm_head.weight"}
        for name, t in fake.loaded.items():
            assert torch.equal(t, expected[name]), name
        assert not torch.equal(fake.loaded["model.layers.0.self_attn.q_proj.weight"],
                               before["base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"])
        # and the trainer trains the unmerged base + adapter again
        for name, t in base_weights(model).items():
            assert torch.allclose(t, before[name], atol=1e-6), name
        trainer.sync()
        assert fake.paths()[6:] == ["/pause", "/collective_rpc", "/reset_prefix_cache", "/policy/version", "/resume"]
        assert fake.version == 2 and trainer.model_version == 2


@pytest.mark.parametrize("route", ["/collective_rpc", "/reset_prefix_cache"])
def test_a_failed_sync_still_resumes_vllm_and_publishes_no_version(tmp_path, route):
    model = tiny_peft()
    before = base_weights(model)
    with FakeVllm(fail=route) as fake:
        sync = DiskMergedSync(directory=tmp_path / "merged", vllm_url=fake.url, proxy_url=fake.url)
        trainer = trl_trainer(model, sync)
        sync.bind(trainer)
        with pytest.raises(WeightSyncError, match=f"{route} answered 500"):
            trainer.sync()
        paths = fake.paths()
        assert paths[0] == "/pause" and paths[-1] == "/resume"  # never left paused
        assert "/policy/version" not in paths and fake.version == 0
        assert trainer.model_version == 0 and trainer.rollout_worker.versions == []
    for name, t in base_weights(model).items():  # TRL's finally unmerged the adapter
        assert torch.allclose(t, before[name], atol=1e-6), name


def test_a_full_disk_names_the_directory_and_the_setting(tmp_path, monkeypatch):
    model = tiny_peft()
    with FakeVllm() as fake:
        sync = DiskMergedSync(directory=tmp_path / "merged", vllm_url=fake.url, proxy_url=fake.url)
        trainer = trl_trainer(model, sync)
        sync.bind(trainer)

        def no_space(*a, **k):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr("safetensors.torch.save_file", no_space)
        with pytest.raises(WeightSyncError, match="merged.*policy_server.merged_dir"):
            trainer.sync()
        assert fake.paths() == ["/pause", "/resume"]
