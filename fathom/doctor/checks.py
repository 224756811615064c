"""What `fathom doctor` reports: venvs, vLLM, prepared models, sandbox layers, GPU. Each check is a row
(name, ok, detail)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _vllm_check(python: str) -> tuple[bool, str]:
    if not Path(python).exists():
        return False, f"{python} missing; run `make setup`"
    try:
        out = subprocess.run(
            [python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        return False, "import vllm timed out"
    if out.returncode != 0:
        return False, out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "import failed"
    return True, f"vllm {out.stdout.strip()} ({python})"


def run_checks() -> list[tuple[str, bool, str]]:
    from fathom.config import load_config
    from fathom.config.model import ModelConfig
    from fathom.policy_server.launch import detect_device, vllm_interpreter
    from fathom.policy_server.models import ModelError, resolve_model

    cfg = load_config(None)
    rows: list[tuple[str, bool, str]] = []
    device = detect_device("auto")
    rows.append(("device", True, device + (" (torch sees CUDA)" if device == "cuda" else " (torch sees no CUDA device)")))
    rows.append(("vllm", *_vllm_check(vllm_interpreter(cfg.policy_server))))
    for name in ("embedded", "tiny"):
        try:
            rows.append((f"model:{name}", True, resolve_model(ModelConfig(name=name))))
        except ModelError as e:
            rows.append((f"model:{name}", False, str(e)))
    try:
        from fathom.env_server.sandbox import detect_layers

        for layer, info in detect_layers().items():
            rows.append((f"sandbox:{layer}", bool(info.get("available")), str(info.get("detail", ""))))
    except ImportError as e:
        rows.append(("sandbox", False, f"sandbox package unavailable: {e}"))
    return rows
