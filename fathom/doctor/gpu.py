"""`fathom doctor --gpu -c CONFIG`: everything a GPU job needs, checked in well under a minute before it spends an
hour. Each check returns (name, ok, detail); the detail of a failed one says what to do. run_job.sh runs it right
after the install, so a wrong driver, a CPU torch, a missing vLLM, a bucket-mounted sync directory or a missing
sandbox layer stops the job in seconds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

CUDA_VERSION = "13.0"
"""The CUDA build of torch both venvs get (Makefile CUDA_VERSION; tests/integration/test_gpu_install.py keeps them equal)."""
MIN_DRIVER = 580
"""The oldest NVIDIA driver that runs CUDA 13.0 (Makefile MIN_DRIVER)."""
MIN_FREE_GB = 20.0
"""Local disk the run needs beyond the merged weights: the model download, checkpoints, logs."""

Check = tuple[str, bool, str]


def driver(smi: Callable[[list[str]], str] | None = None) -> Check:
    """nvidia-smi's driver version against MIN_DRIVER."""
    def run(args: list[str]) -> str:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=20, check=True).stdout

    smi = smi or run
    try:
        out = smi(["--query-gpu=driver_version,name,memory.total", "--format=csv,noheader"]).strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError) as e:
        return "driver", False, f"nvidia-smi failed ({e}): no NVIDIA driver here; run on a GPU machine"
    version, *rest = [x.strip() for x in out.split(",")]
    try:
        ok = int(version.split(".")[0]) >= MIN_DRIVER
    except ValueError:
        return "driver", False, f"nvidia-smi reported {out!r}, not a driver version"
    detail = f"{version} on {', '.join(rest)}"
    return "driver", ok, detail if ok else f"{detail}: older than {MIN_DRIVER}, the oldest for CUDA {CUDA_VERSION}"


_TORCH_PROBE = ("import json, torch; print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
                "'gpus': torch.cuda.device_count() if torch.cuda.is_available() else 0}))")


def venv_torch(name: str, python: str) -> Check:
    """`python`'s torch: the CUDA_VERSION build, and at least one usable GPU."""
    if not Path(python).exists():
        return f"torch ({name})", False, f"{python} missing: run `make setup-gpu`"
    try:
        p = subprocess.run([python, "-c", _TORCH_PROBE], capture_output=True, text=True, timeout=60)
        info = json.loads(p.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError) as e:
        return f"torch ({name})", False, f"{python} cannot import torch ({e}): run `make setup-gpu`"
    detail = f"torch {info['torch']} (CUDA {info['cuda']}), {info['gpus']} GPU(s), {python}"
    if info["cuda"] != CUDA_VERSION:
        return f"torch ({name})", False, f"{detail}: not the CUDA {CUDA_VERSION} build; rm -rf .stamps && make setup-gpu"
    if not info["gpus"]:
        return f"torch ({name})", False, f"{detail}: no usable GPU (driver, CUDA_VISIBLE_DEVICES?)"
    return f"torch ({name})", True, detail


def vllm_import(python: str) -> Check:
    if not Path(python).exists():
        return "vllm", False, f"{python} missing: run `make setup-gpu`"
    p = subprocess.run([python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True,
                       timeout=120)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["import failed"])[-1]
        return "vllm", False, f"{python}: {last}; run `make setup-gpu`"
    return "vllm", True, f"vllm {p.stdout.strip()} ({python})"


def mount_type(path: Path, mounts: str | None = None) -> str:
    """The filesystem type of the mount holding `path` (the longest mount point that prefixes it)."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            return "unknown"
    p, best, fstype = str(path.resolve()), "", "unknown"
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) >= 3 and (p == parts[1] or p.startswith(parts[1].rstrip("/") + "/")) and len(parts[1]) > len(best):
            best, fstype = parts[1], parts[2]
    return fstype


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def local_dir(name: str, path: Path, need_gb: float, mounts: str | None = None,
              usage: Callable[[Path], shutil._ntuple_diskusage] = shutil.disk_usage) -> Check:
    """A directory that must be on local disk (not FUSE or a network mount), writable, with `need_gb` free."""
    at = _existing(path)
    fstype = mount_type(path, mounts)  # the path's own mount: it may sit on one that is not mounted yet here
    if fstype.startswith("fuse") or fstype in ("nfs", "nfs4", "cifs", "smb3"):
        return name, False, f"{path} is on a {fstype} mount; put it on local disk"
    if not os.access(at, os.W_OK):
        return name, False, f"{path} is not writable (nearest existing: {at})"
    free = usage(at).free / 1e9
    detail = f"{path} on {fstype}, {free:.0f} GB free"
    return name, free >= need_gb, detail if free >= need_gb else f"{detail}: needs {need_gb:.0f} GB"


def sync_prerequisites(cfg, mounts: str | None = None) -> list[Check]:
    from fathom.config import merged_backend

    backend, ps = merged_backend(cfg), cfg.policy_server
    if backend is None:
        return [("sync: adapter", True, f"{ps.max_loras} adapter slots (TRL needs max_staleness + 2)")]
    if backend == "disk":
        from fathom.trainer.merged_dir import disk_dir

        # "auto" writes to tmpfs only when it has room, else here: the disk must hold them either way
        where = disk_dir(ps.merged_dir, cfg.run_dir)
        # two merged copies are kept (the one vLLM reads, the one being written): 2 x ~2 bytes per parameter
        name, ok, detail = local_dir("sync: disk", where, 8.0, mounts)
        return [(name, ok, detail)]
    from fathom.trainer.gpu_env import GpuEnvError, check

    rows: list[Check] = []
    try:
        rows.append(("sync: nccl", True, f"TRL weight transfer with vllm {check()['vllm']}"))
    except GpuEnvError as e:
        rows.append(("sync: nccl", False, str(e)))
    return rows


def sandbox_layers(required: list[str]) -> list[Check]:
    from fathom.env_server.sandbox import detect_layers

    found = detect_layers()
    return [(f"sandbox: {layer}", bool(found.get(layer, {}).get("available")),
             str(found.get(layer, {}).get("detail", "unknown layer"))) for layer in required]


def run_gpu_checks(cfg, *, vllm_python: str, mounts: str | None = None) -> list[Check]:
    rows = [driver(), venv_torch("trainer", sys.executable), venv_torch("vllm", vllm_python), vllm_import(vllm_python)]
    rows += sync_prerequisites(cfg, mounts)
    rows += sandbox_layers(list(cfg.sandbox.required_layers))
    rows.append(local_dir("disk: run dir", cfg.run_dir, MIN_FREE_GB, mounts))
    if cfg.launch.bucket_dir:
        b = Path(cfg.launch.bucket_dir)
        rows.append(("bucket", b.is_dir() and os.access(b, os.W_OK),
                     f"{b} {'mounted and writable' if b.is_dir() and os.access(b, os.W_OK) else 'missing or read-only'}"
                     " (launch.bucket_dir: mount the bucket as a job volume there)"))
    return rows
