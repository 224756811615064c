"""A CUDA config on a trainer whose torch sees no GPU stops with the reason, instead of training on the CPU patches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fathom.config import load_config
from fathom.trainer.build import Endpoints, TrainerDeviceError, build_trainer

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where torch sees no CUDA device")
def test_a_cuda_config_without_cuda_stops_before_loading_anything(tmp_path):
    cfg = load_config(ROOT / "configs/qwen1.5b-a100.toml", ["--output_dir", str(tmp_path)])
    eps = Endpoints(vllm_url="http://127.0.0.1:9", proxy_url="http://127.0.0.1:9", env_url="http://127.0.0.1:9")
    with pytest.raises(TrainerDeviceError) as e:
        build_trainer(cfg, model_path=str(tmp_path / "no-model"), endpoints=eps, task_ids=["t"], progress=False)
    msg = str(e.value)
    assert "policy_server.device is 'cuda'" in msg and "make setup-gpu" in msg and torch.__version__ in msg
    assert ("CPU build" in msg) == (torch.version.cuda is None)
    assert not (tmp_path / cfg.run_name).exists()  # refused before the run directory or the model
