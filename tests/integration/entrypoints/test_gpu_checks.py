"""`fathom doctor --gpu`: each check's verdict and message, on fakes where only a GPU machine could answer."""

from __future__ import annotations

import os
import re
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from fathom.config import load_config
from fathom.doctor import gpu as gpu_checks

ROOT = Path(__file__).resolve().parents[3]
MOUNTS = "/dev/nvme0n1p1 / ext4 rw 0 0\nhf-mount /data fuse.hf-mount rw 0 0\ntmpfs /dev/shm tmpfs rw 0 0\n"
Usage = namedtuple("Usage", "total used free")


def test_the_constants_are_the_makefiles():
    mk = (ROOT / "Makefile").read_text()
    assert re.search(rf"^CUDA_VERSION\s*:=\s*{re.escape(gpu_checks.CUDA_VERSION)}$", mk, re.M)
    assert re.search(rf"^MIN_DRIVER\s*:=\s*{gpu_checks.MIN_DRIVER}$", mk, re.M)


@pytest.mark.parametrize("out,ok,words", [
    ("580.82.07, NVIDIA A100-SXM4-80GB, 81920 MiB\n", True, ["580.82.07", "A100"]),
    ("570.86.15, NVIDIA A100-SXM4-80GB, 81920 MiB\n", False, ["older than 580", "CUDA 13.0"]),
    ("", False, ["nvidia-smi failed"]),
])
def test_driver(out, ok, words):
    name, got, detail = gpu_checks.driver(lambda args: out)
    assert (name, got) == ("driver", ok) and all(w in detail for w in words), detail


def test_no_nvidia_smi_says_so():
    def missing(args):
        raise FileNotFoundError(2, "No such file or directory: 'nvidia-smi'")

    name, ok, detail = gpu_checks.driver(missing)
    assert not ok and "no NVIDIA driver" in detail


def test_a_sync_directory_on_the_bucket_mount_is_refused(tmp_path):
    assert gpu_checks.mount_type(Path("/data/runs/x"), MOUNTS) == "fuse.hf-mount"
    assert gpu_checks.mount_type(Path("/tmp/fathom-merged"), MOUNTS) == "ext4"
    name, ok, detail = gpu_checks.local_dir("sync: disk", Path("/data/merged"), 8, MOUNTS)
    assert not ok and "fuse.hf-mount" in detail and "local disk" in detail
    full = gpu_checks.local_dir("disk", tmp_path / "new" / "dir", 20, f"/dev/x {tmp_path} ext4 rw 0 0",
                                usage=lambda p: Usage(100e9, 95e9, 5e9))
    assert full[1] is False and "5 GB free" in full[2] and "needs 20 GB" in full[2]
    assert gpu_checks.local_dir("disk", tmp_path, 20, f"/dev/x {tmp_path} ext4 rw 0 0",
                                usage=lambda p: Usage(100e9, 10e9, 90e9))[1]


def test_the_sync_backend_decides_what_is_checked(tmp_path):
    cfg = load_config(ROOT / "configs/qwen1.5b-a100.toml", ["--policy_server.merged_dir", "/data/merged"])
    (row,) = gpu_checks.sync_prerequisites(cfg, MOUNTS)
    assert row[0] == "sync: disk" and not row[1] and "/data/merged" in row[2]
    adapter = load_config(ROOT / "configs/qwen1.5b-a100.toml", ["--policy_server.weight_sync", "adapter",
                                                                "--policy_server.max_loras", "6"])
    assert gpu_checks.sync_prerequisites(adapter)[0][:2] == ("sync: adapter", True)


def test_a_cpu_torch_is_named_with_the_fix():
    name, ok, detail = gpu_checks.venv_torch("trainer", sys.executable)
    import torch

    if torch.version.cuda == gpu_checks.CUDA_VERSION and torch.cuda.is_available():
        assert ok
    else:
        assert not ok and "make setup-gpu" in detail or "no usable GPU" in detail
    assert gpu_checks.venv_torch("vllm", "/nonexistent/python")[2] == "/nonexistent/python missing: run `make setup-gpu`"


def test_doctor_gpu_exits_1_naming_what_is_missing(tmp_path):
    """In-process (Typer's runner, a fake nvidia-smi first on PATH): the checks themselves run their subprocesses."""
    from typer.testing import CliRunner

    from fathom.entrypoints.cli import app

    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho '570.86.15, NVIDIA A100-SXM4-80GB, 81920 MiB'\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    r = CliRunner(env={"PATH": f"{tmp_path}:{os.environ['PATH']}"}).invoke(
        app, ["doctor", "--gpu", "-c", str(ROOT / "configs/qwen1.5b-a100.toml"), "--policy_server.vllm_python",
              "/nonexistent/python", "--launch.bucket_dir", str(tmp_path)])
    assert r.exit_code == 1, r.output
    assert "570.86.15 on NVIDIA A100-SXM4-80GB" in r.stdout and "older than 580" in r.stdout
    assert "not ready for a GPU job: driver" in r.stderr and "vllm" in r.stderr and "bucket" not in r.stderr
