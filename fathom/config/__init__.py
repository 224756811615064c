"""One typed config tree for the whole system, with cross-component checks.

Load with `load_config("configs/smoke.toml", ["--trainer.learning_rate", "1e-6"])`;
the resolved tree is written to the run directory by `write_resolved`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import SecretStr, ValidationError, model_validator

from fathom.config.base import ConfigError, FathomModel, apply_overrides, fathom_home, read_toml
from fathom.config.capture_proxy import CaptureProxyConfig
from fathom.config.cpus import parse_cpu_list
from fathom.config.env_server import EnvServerConfig
from fathom.config.eval import EvalConfig
from fathom.config.launch import LaunchConfig
from fathom.config.model import ModelConfig
from fathom.config.policy_server import PolicyServerConfig
from fathom.config.sandbox import SandboxConfig
from fathom.config.sft import SftConfig
from fathom.config.tasks import TasksConfig
from fathom.config.trainer import TrainerConfig

__all__ = ["ConfigError", "FathomConfig", "fathom_home", "load_config", "merged_backend", "write_resolved"]


class FathomConfig(FathomModel):
    run_name: str = "smoke"
    """Name of the run; the run directory is `{output_dir}/{run_name}`."""

    output_dir: str = "runs"
    """Parent directory of run directories (logs, resolved config, checkpoints)."""

    model: ModelConfig = ModelConfig()
    """The policy model the trainer trains; the policy server serves the same weights."""

    server_model: ModelConfig | None = None
    """What the policy server serves when a launcher sets it apart from `model`; it must name the same weights and dtype."""

    policy_server: PolicyServerConfig = PolicyServerConfig()
    """vLLM policy server."""

    capture_proxy: CaptureProxyConfig = CaptureProxyConfig()
    """Capture proxy in front of the policy server."""

    sandbox: SandboxConfig = SandboxConfig()
    """Sandboxed REPL."""

    tasks: TasksConfig = TasksConfig()
    """Task suite and reward."""

    env_server: EnvServerConfig = EnvServerConfig()
    """OpenEnv env server and episode runner."""

    trainer: TrainerConfig = TrainerConfig()
    """Async GRPO trainer."""

    eval: EvalConfig = EvalConfig()
    """Held-out evaluation and the per-checkpoint watcher."""

    sft: SftConfig = SftConfig()
    """SFT warm start before GRPO."""

    launch: LaunchConfig = LaunchConfig()
    """The main job: stages and server start-up."""

    shared_token: SecretStr | None = None
    """Token the capture proxy and env server require (header `X-Fathom-Token`, or `Authorization: Bearer` on the
    env server) and every fathom client sends; required to bind either past loopback. Prefer `$FATHOM_SHARED_TOKEN`
    (used when this is unset): a token here would sit in the TOML. Written to the run directory masked."""

    def token(self) -> str | None:
        """The shared token in force: `shared_token`, else `$FATHOM_SHARED_TOKEN`, else None."""
        from fathom.config.security import shared_token

        return shared_token(self.shared_token)

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.run_name

    @property
    def policy_url(self) -> str:
        """Base URL (no /v1) of the engine the capture proxy forwards to: `capture_proxy.upstream_url`, else the
        policy server's own address."""
        return self.capture_proxy.upstream_url or self.policy_server.url

    @property
    def proxy_url(self) -> str:
        """Base URL of the capture proxy that episodes record through: `env_server.proxy_url`, else the proxy's
        own address."""
        return self.env_server.proxy_url or self.capture_proxy.url

    @property
    def env_url(self) -> str:
        """Base URL of the env server this config places (`env_server.urls` lists others the trainer spreads to)."""
        return self.env_server.url

    @model_validator(mode="after")
    def _cross_checks(self) -> "FathomConfig":
        if self.server_model is not None:
            if self.server_model.name != self.model.name:
                raise ValueError(
                    f"server_model.name ({self.server_model.name!r}) differs from model.name ({self.model.name!r}); "
                    "the policy server must serve the model the trainer trains: remove server_model"
                )
            if self.server_model.dtype != self.model.dtype:
                raise ValueError(
                    f"server_model.dtype ({self.server_model.dtype}) differs from model.dtype ({self.model.dtype}); "
                    "logprobs would drift between sampler and trainer: use one dtype"
                )
        ps, lora = self.policy_server, self.trainer.lora
        if ps.enable_lora and lora.rank > ps.max_lora_rank:
            raise ValueError(
                f"trainer.lora.rank ({lora.rank}) exceeds policy_server.max_lora_rank ({ps.max_lora_rank}); "
                "vLLM would refuse the adapter: raise policy_server.max_lora_rank or lower trainer.lora.rank"
            )
        if ps.enable_lora and ps.weight_sync == "adapter" and ps.max_loras < self.trainer.max_staleness + 2:
            raise ValueError(
                f"policy_server.max_loras ({ps.max_loras}) is below trainer.max_staleness + 2 "
                f"({self.trainer.max_staleness} + 2); in-flight sessions would lose their pinned adapter: "
                "raise policy_server.max_loras or lower trainer.max_staleness"
            )
        if self.trainer.cpu_cores and ps.cpu_cores not in ("auto", "nobind"):
            both = sorted(set(parse_cpu_list(self.trainer.cpu_cores)) & set(parse_cpu_list(ps.cpu_cores)))
            if both:
                raise ValueError(
                    f"trainer.cpu_cores ({self.trainer.cpu_cores!r}) and policy_server.cpu_cores ({ps.cpu_cores!r}) "
                    f"share cores {both}; a parallel region would wait on the other process: make them disjoint"
                )
        if ps.weight_sync == "merged" and ps.merged_sync == "auto":
            # Resolved here so that vLLM's flags, the trainer and the dry run all read one answer.
            two_gpus = ps.device != "cpu" and ps.cuda_device != self.trainer.cuda_device
            ps.merged_sync = "nccl" if two_gpus else "disk"
        if ps.weight_sync == "merged" and ps.merged_sync == "nccl":
            if ps.device == "cpu":
                raise ValueError(
                    "policy_server.merged_sync is 'nccl' but policy_server.device is 'cpu'; NCCL needs CUDA: "
                    "set policy_server.merged_sync = 'disk' (or 'auto')"
                )
            if ps.cuda_device == self.trainer.cuda_device:
                raise ValueError(
                    f"policy_server.merged_sync is 'nccl' but policy_server.cuda_device ({ps.cuda_device}) and "
                    f"trainer.cuda_device ({self.trainer.cuda_device}) are the same GPU; NCCL refuses two ranks on one "
                    "device (\"Duplicate GPU detected\"): set policy_server.merged_sync = 'disk' (or 'auto'), or give "
                    "the trainer another GPU with trainer.cuda_device"
                )
        if ps.dtype not in ("model", "auto", self.model.dtype) and merged_backend(self) == "nccl":
            raise ValueError(
                f"policy_server.dtype ({ps.dtype}) differs from model.dtype ({self.model.dtype}) with NCCL weight "
                "sync; NCCL sends the trainer's dtype, which only the disk reload converts: set "
                "policy_server.merged_sync = 'disk', use weight_sync = 'adapter', or dtype = 'model'"
            )
        if ps.lora_modules and not ps.enable_lora:
            raise ValueError("policy_server.lora_modules names adapters but policy_server.enable_lora is false; "
                             "enable LoRA or drop the adapters")
        if ps.weight_sync == "adapter" and not ps.enable_lora:
            raise ValueError(
                "policy_server.weight_sync is 'adapter' but policy_server.enable_lora is false; "
                "enable LoRA or use weight_sync = 'merged'"
            )
        return self


def merged_backend(cfg: FathomConfig) -> str | None:
    """How merged weights reach vLLM under this config: `disk` or `nccl` (`auto` is resolved when the config is
    validated: NCCL only for a CUDA config whose trainer and vLLM have different GPUs), or None under adapter sync."""
    ps = cfg.policy_server
    return ps.merged_sync if ps.weight_sync == "merged" else None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> FathomConfig:
    """Read TOML (or defaults), apply dotted overrides, validate; errors name the input."""
    data: dict[str, Any] = read_toml(path) if path else {}
    data = apply_overrides(data, overrides or [])
    try:
        return FathomConfig.model_validate(data)
    except ValidationError as e:
        where = f"config {str(path)!r}" if path else "config"
        lines = []
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
            lines.append(f"  {loc}: {err['msg']}")
        raise ConfigError(f"{where} is invalid:\n" + "\n".join(lines)) from None


def write_resolved(cfg: FathomConfig, run_dir: str | Path | None = None) -> Path:
    """Write the fully resolved config (defaults filled in) as JSON to the run directory."""
    out = Path(run_dir) if run_dir else cfg.run_dir
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.resolved.json"
    path.write_text(json.dumps(cfg.model_dump(mode="json"), indent=2) + "\n")
    return path
