"""The vLLM launcher without vLLM: argv, port in use, missing model, death at start-up."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import time
from pathlib import Path

import pytest

from fathom.config import load_config
from fathom.policy_server.launch import REPO_ROOT, PolicyServer, PolicyServerError, build_command, detect_device
from tests.ports import free_port


def _cfg(*overrides: str):
    return load_config(None, list(overrides))


def _model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text("{}")
    return d


def test_cpu_command_has_what_the_pipeline_needs():
    cfg = _cfg("--policy_server.device", "cpu", "--policy_server.enforce_eager", "true")
    argv, env = build_command(cfg.policy_server, cfg.model, "/m")
    joined = " ".join(argv)
    assert argv[0] == str(REPO_ROOT / cfg.policy_server.vllm_python)
    assert "--served-model-name fathom-base" in joined
    assert "--logprobs-mode processed_logprobs" in joined
    assert "--dtype float32" in joined
    assert "--enable-lora --max-lora-rank 16 --max-loras 4" in joined
    assert "--enforce-eager" in argv
    assert "--weight-transfer-config" not in argv
    assert argv[argv.index("--seed") + 1] == "0"  # vLLM's own default, unless a run picks its rollout seed
    seeded = _cfg("--policy_server.device", "cpu", "--policy_server.seed", "7")
    argv7, _ = build_command(seeded.policy_server, seeded.model, "/m")
    assert argv7[argv7.index("--seed") + 1] == "7"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"  # loopback unless configured otherwise
    # Adapter sync needs runtime LoRA updating, not dev mode (which would expose /collective_rpc).
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "1" and "VLLM_SERVER_DEV_MODE" not in env


def test_cpu_cores_bind_vllms_worker_only_when_given():
    cfg = _cfg("--policy_server.device", "cpu")
    assert "VLLM_CPU_OMP_THREADS_BIND" not in build_command(cfg.policy_server, cfg.model, "/m")[1]  # vLLM's auto
    cfg = _cfg("--policy_server.device", "cpu", "--policy_server.cpu_cores", "0")
    assert build_command(cfg.policy_server, cfg.model, "/m")[1]["VLLM_CPU_OMP_THREADS_BIND"] == "0"


def test_vllm_uses_the_compile_cache_that_loads_on_cpu_unless_the_user_chose(monkeypatch):
    cfg = _cfg("--policy_server.device", "cpu")
    monkeypatch.delenv("VLLM_USE_AOT_COMPILE", raising=False)
    assert build_command(cfg.policy_server, cfg.model, "/m")[1]["VLLM_USE_AOT_COMPILE"] == "0"
    monkeypatch.setenv("VLLM_USE_AOT_COMPILE", "1")
    assert build_command(cfg.policy_server, cfg.model, "/m")[1]["VLLM_USE_AOT_COMPILE"] == "1"


@pytest.mark.parametrize("setting,native,device,want", [
    ("model", True, "cpu", "float32"), ("auto", True, "cpu", "bfloat16"), ("auto", False, "cpu", "float32"),
    ("auto", True, "cuda", "float32"), ("bfloat16", False, "cpu", "bfloat16")])
def test_serving_dtype(monkeypatch, setting, native, device, want):
    from fathom.policy_server import launch

    monkeypatch.setattr(launch, "cpu_has_native_bf16", lambda cpuinfo="/proc/cpuinfo": native)
    cfg = _cfg("--policy_server.dtype", setting, "--policy_server.device", "cpu")
    assert launch.serving_dtype(cfg.policy_server, cfg.model, device) == want
    if device == "cpu":
        argv, _ = build_command(cfg.policy_server, cfg.model, "/m")
        assert argv[argv.index("--dtype") + 1] == want


def test_native_bf16_is_read_from_the_cpu_flags(tmp_path):
    from fathom.policy_server.launch import cpu_has_native_bf16

    info = tmp_path / "cpuinfo"
    info.write_text("flags\t\t: fpu avx2 avx512f\n")
    assert not cpu_has_native_bf16(str(info))
    info.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16\n")
    assert cpu_has_native_bf16(str(info))
    assert not cpu_has_native_bf16(str(tmp_path / "absent"))


def test_one_check_says_where_the_auto_settings_fall_back_to_fp32(tmp_path):
    from fathom.policy_server.launch import cpu_without_native_bf16

    plain, bf16 = tmp_path / "plain", tmp_path / "bf16"
    plain.write_text("flags\t\t: fpu avx2\n")
    bf16.write_text("flags\t\t: fpu avx2 amx_bf16\n")
    assert cpu_without_native_bf16("cpu", str(plain))
    assert not cpu_without_native_bf16("cpu", str(bf16))
    assert not cpu_without_native_bf16("cuda", str(plain))  # a GPU serves in the model's dtype regardless


def test_a_serving_dtype_other_than_the_trainers_needs_the_disk_reload():
    two_gpus = ["--policy_server.device", "cuda", "--policy_server.weight_sync", "merged",
                "--policy_server.enable_lora", "false", "--trainer.cuda_device", "1"]
    with pytest.raises(ValueError, match="policy_server.dtype.*merged_sync = 'disk'"):
        _cfg("--policy_server.dtype", "bfloat16", *two_gpus)
    _cfg("--policy_server.dtype", "bfloat16", *two_gpus, "--policy_server.merged_sync", "disk")
    _cfg("--policy_server.dtype", "bfloat16", "--policy_server.device", "cpu", "--policy_server.weight_sync", "merged")


def test_dev_mode_only_when_the_weight_sync_needs_it():
    cfg = _cfg("--policy_server.device", "cpu", "--policy_server.weight_sync", "merged")
    _, env = build_command(cfg.policy_server, cfg.model, "/m")
    # Eval and the checkpoint watcher hot-load adapters under merged sync too.
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "1"
    cfg = _cfg("--policy_server.device", "cpu", "--policy_server.weight_sync", "merged", "--policy_server.enable_lora",
               "false")
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in build_command(cfg.policy_server, cfg.model, "/m")[1]
    for setting, want in (("on", True), ("off", False)):
        cfg = _cfg("--policy_server.device", "cpu", "--policy_server.dev_mode", setting)
        assert ("VLLM_SERVER_DEV_MODE" in build_command(cfg.policy_server, cfg.model, "/m")[1]) is want
    cfg = _cfg("--policy_server.device", "cpu", "--policy_server.host", "0.0.0.0")
    argv, _ = build_command(cfg.policy_server, cfg.model, "/m")
    assert argv[argv.index("--host") + 1] == "0.0.0.0"


def test_cuda_is_detected_by_torch_not_by_nvidia_smi(monkeypatch, tmp_path):
    import torch

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexit 0\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert detect_device("auto") == "cpu"  # a driver tool on PATH is not a usable GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert detect_device("auto") == "cuda"


def test_cuda_launches_with_a_venv_interpreter_not_bare_python(tmp_path):
    cfg = _cfg("--policy_server.device", "cuda", "--policy_server.vllm_python", str(tmp_path / "absent" / "python"))
    argv, env = build_command(cfg.policy_server, cfg.model, "/m")
    assert argv[0] == sys.executable and os.path.isabs(argv[0])
    venv = tmp_path / "venv-python"
    venv.write_text("")
    cfg = _cfg("--policy_server.device", "cuda", "--policy_server.vllm_python", str(venv))
    assert build_command(cfg.policy_server, cfg.model, "/m")[0][0] == str(venv)


def test_two_gpu_merged_sync_adds_nccl_weight_transfer_and_places_vllm(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cfg = _cfg("--policy_server.device", "cuda", "--policy_server.weight_sync", "merged", "--model.dtype", "bfloat16",
               "--policy_server.cuda_device", "1")
    assert cfg.policy_server.merged_sync == "nccl"  # auto: the trainer is on GPU 0, vLLM on GPU 1
    argv, env = build_command(cfg.policy_server, cfg.model, "/m")
    i = argv.index("--weight-transfer-config")
    assert json.loads(argv[i + 1]) == {"backend": "nccl"}
    assert "--enforce-eager" not in argv and "--dtype" in argv and "bfloat16" in argv
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")  # an allotment on a shared machine: its second GPU
    assert build_command(cfg.policy_server, cfg.model, "/m")[1]["CUDA_VISIBLE_DEVICES"] == "6"


def test_one_gpu_merged_sync_reloads_from_disk_without_a_transfer_engine(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cfg = _cfg("--policy_server.device", "cuda", "--policy_server.weight_sync", "merged", "--model.dtype", "bfloat16")
    assert cfg.policy_server.merged_sync == "disk"
    argv, env = build_command(cfg.policy_server, cfg.model, "/m")
    assert "--weight-transfer-config" not in argv
    assert env["VLLM_SERVER_DEV_MODE"] == "1"  # /collective_rpc reload_weights
    assert env["CUDA_VISIBLE_DEVICES"] == "0"


def test_missing_model_directory_is_named(tmp_path):
    cfg = _cfg("--policy_server.device", "cpu")
    server = PolicyServer(cfg.policy_server, cfg.model, str(tmp_path / "absent"), tmp_path)
    with pytest.raises(PolicyServerError, match="absent.*fathom model prepare"):
        server.start()
    assert server.proc is None


def test_port_in_use_is_named_and_nothing_starts(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        cfg = _cfg("--policy_server.device", "cpu", "--policy_server.port", str(port))
        server = PolicyServer(cfg.policy_server, cfg.model, str(_model_dir(tmp_path)), tmp_path)
        with pytest.raises(PolicyServerError, match=f"port {port}.*in use"):
            server.start()
        assert server.proc is None


def _fake_vllm(tmp_path: Path, body: str) -> Path:
    """A stand-in interpreter for fault injection: ignores its argv and runs `body` in bash."""
    script = tmp_path / "fake-python"
    script.write_text("#!/usr/bin/env bash\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script



def test_death_at_startup_shows_last_50_lines_and_leaves_no_process(tmp_path):
    fake = _fake_vllm(
        tmp_path,
        # A child that would outlive its parent if the group were not killed.
        "sleep 300 &\necho $! > " + str(tmp_path / "child.pid") + "\n"
        "for i in $(seq 1 80); do echo \"log line $i\"; done\nexit 3\n",
    )
    cfg = _cfg("--policy_server.device", "cpu", "--policy_server.vllm_python", str(fake),
               "--policy_server.port", str(free_port()))
    server = PolicyServer(cfg.policy_server, cfg.model, str(_model_dir(tmp_path)), tmp_path / "logs")
    server.start()
    with pytest.raises(PolicyServerError) as exc:
        server.wait_healthy(timeout_s=30)
    msg = str(exc.value)
    assert "exited with code 3" in msg
    assert "log line 80" in msg and "log line 31" in msg and "log line 30\n" not in msg
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.1)
    assert not _alive(child), "the server's process group must be gone"


def test_startup_timeout_stops_the_group(tmp_path):
    fake = _fake_vllm(tmp_path, "echo starting\nexec sleep 300\n")
    cfg = _cfg("--policy_server.device", "cpu", "--policy_server.vllm_python", str(fake),
               "--policy_server.port", str(free_port()))
    server = PolicyServer(cfg.policy_server, cfg.model, str(_model_dir(tmp_path)), tmp_path / "logs")
    server.start()
    pid = server.proc.pid
    with pytest.raises(PolicyServerError, match="did not become healthy within 1 s"):
        server.wait_healthy(timeout_s=1)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False
