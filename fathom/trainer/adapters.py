"""LoRA adapters outside the GRPO loop: continue training from one, and serve one as merged weights.

- `load_init_adapter`: GRPO starts from the SFT adapter. TRL's AsyncGRPOTrainer only builds a fresh
  adapter from a `peft_config`, so the warm start's weights are copied into it (same rank, alpha and
  target modules, checked). TRL's cold sync at train begin then serves base + SFT before any rollout.
- `serve_merged`: put base (+ an adapter, merged) on a running vLLM by the same disk reload the CPU
  weight sync uses, and move the proxy's policy version on, so evaluation can score base, SFT and
  GRPO weights one after the other on a server that runs without LoRA.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class AdapterError(ValueError):
    """An adapter that cannot be used here; the message names the directory and the mismatch."""


def adapter_dir(spec: str) -> Path:
    """A local adapter directory, or a Hub repo id downloaded to the local cache."""
    p = Path(spec).expanduser()
    if p.is_dir():
        return p
    if p.exists() or spec.startswith((".", "/")) or spec.count("/") != 1:
        raise AdapterError(f"adapter {spec!r} is not a directory (nor a Hub repo id owner/name)")
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(spec, allow_patterns=["adapter_config.json", "adapter_model.safetensors"]))


def _read(directory: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    from safetensors.torch import load_file

    cfg_path, weights = directory / "adapter_config.json", directory / "adapter_model.safetensors"
    if not cfg_path.is_file() or not weights.is_file():
        raise AdapterError(f"{directory} is not a PEFT adapter (needs adapter_config.json and "
                           "adapter_model.safetensors); point at the adapter directory, e.g. runs/<run>/sft/adapter")
    return json.loads(cfg_path.read_text()), load_file(str(weights))


def load_init_adapter(model: Any, spec: str, lora: Any) -> Path:
    """Copy the adapter's weights into the trainer's fresh PEFT model; returns the adapter directory."""
    from peft import set_peft_model_state_dict

    directory = adapter_dir(spec)
    acfg, state = _read(directory)
    want = {"r": lora.rank, "lora_alpha": lora.alpha, "target_modules": sorted(lora.target_modules)}
    got = {"r": acfg.get("r"), "lora_alpha": acfg.get("lora_alpha"), "target_modules": sorted(acfg.get("target_modules") or [])}
    if got != want:
        raise AdapterError(f"trainer.init_adapter {str(directory)!r} has {got}, but trainer.lora asks for {want}; "
                           "train the warm start with the same trainer.lora settings")
    result = set_peft_model_state_dict(model, state)
    missing = [k for k in result.missing_keys if "lora_" in k]
    if result.unexpected_keys or missing:
        raise AdapterError(f"trainer.init_adapter {str(directory)!r} does not fit the model: "
                           f"unexpected {result.unexpected_keys[:3]}, missing {missing[:3]}")
    return directory


def merged_tensors(model_dir: str | Path, adapter: str | None):
    """(name, tensor) of base (+ adapter merged) under the names vLLM loads, as the GRPO weight sync sends them."""
    import torch
    from transformers import AutoModelForCausalLM

    from fathom.trl_compat.trainer import vllm_named_params

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir(adapter)))
        model.merge_adapter()
    with torch.no_grad():
        yield from vllm_named_params(model)


def serve_merged(model_dir: str | Path, adapter: str | None, *, vllm_url: str, proxy_url: str, directory: Path,
                 timeout_s: float = 600.0, state_path: Path | None = None, http: Any = None) -> int:
    """Reload vLLM with base (+ adapter) and report the next policy version to the proxy; returns that version.

    `state_path` (the run's `policy_state.json`) then names these weights and that version, so a policy server
    that `fathom launch` restarts mid-evaluation gets this stage's weights back, not the last ones trained."""
    from fathom.trainer.weight_sync import DiskMergedSync

    sync = DiskMergedSync(directory=directory, vllm_url=vllm_url, proxy_url=None, timeout_s=timeout_s,
                          state_path=state_path, http=http)
    try:
        version = sync.proxy_version(proxy_url) + 1
        sync.pause()
        sync.send_weights(merged_tensors(model_dir, adapter))
        sync.resume()
        sync.report_version(version, proxy_url)
        sync._record(version=version)
    finally:
        sync.destroy()
    return version
