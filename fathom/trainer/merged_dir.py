"""Where disk merged sync writes its safetensors: tmpfs when it has room, else the run directory.

`policy_server.merged_dir = "auto"` puts them in `/dev/shm/fathom-<run>-<hash of the run dir>`: tmpfs takes the
write without a disk behind it, so the sync's write is shorter (docs/trainer.md has the measurements); vLLM's
reload reads the file from memory either way. The folder's name comes from the run
directory alone, so the trainer that fills it and the `fathom launch` that removes it name the same folder
without talking to each other.

The folder must outlive the trainer: the launcher's eval-stage vLLM restart, and any restart of vLLM before the
evaluation loads its own weights, reloads the newest merged weights that `policy_state.json` names. So the
launcher removes it when it stops (also on SIGTERM), and a standalone `fathom train` when it stops; `fathom
train --keep-merged` (what the launcher runs) leaves it. tmpfs is memory: a folder left by a killed process
(SIGKILL) stays until the next run in that run directory reuses it, or until the machine restarts.

Torch-free: the launcher imports it.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

SHM = Path("/dev/shm")

AUTO = "auto"

MARGIN_BYTES = 256 * 2**20
"""Free tmpfs kept beyond two copies: other processes (vLLM's shared memory among them) use /dev/shm too."""


@dataclass(frozen=True)
class MergedDir:
    path: Path
    tmpfs: bool
    """True when `path` is the run's tmpfs folder, which whoever owns the run must remove (`remove_tmpfs`)."""
    note: str | None = None
    """Why "auto" fell back to the run directory, for the log; None when nothing fell back."""


def tmpfs_dir(run_dir: str | Path, run_name: str, shm: Path | None = None) -> Path:
    """The tmpfs folder "auto" uses for this run directory (under `shm`, default `SHM`)."""
    shm = SHM if shm is None else shm
    digest = hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:10]
    return shm / f"fathom-{run_name}-{digest}"


def disk_dir(setting: str, run_dir: str | Path) -> Path:
    """The folder on disk for `policy_server.merged_dir = setting`: the path it names, else `<run dir>/merged`
    (what empty means, and where "auto" falls back to when tmpfs has no room)."""
    return Path(setting) if setting not in ("", AUTO) else Path(run_dir) / "merged"


def mem_available(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """MemAvailable in bytes, or None where the kernel does not say."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def choose(setting: str, run_dir: str | Path, run_name: str, need_bytes: int, shm: Path | None = None,
           usage: Callable[[Path], shutil._ntuple_diskusage] = shutil.disk_usage,
           available: Callable[[], int | None] | None = None) -> MergedDir:
    """The folder for `policy_server.merged_dir = setting`, given the merged state dict's size in bytes.

    A path is used as given; empty means `<run dir>/merged`. "auto" takes the tmpfs folder when `shm` exists and
    its free space holds two copies (the one vLLM serves and the one being written) plus `MARGIN_BYTES`; the
    folder's own files count as free, since they are pruned as new ones come. tmpfs pages are memory that is
    never written back (no swap here), and a tmpfs is usually sized at half or all of RAM whatever else runs, so
    the room is the smaller of its free space and the memory the kernel says is available."""
    fallback, shm = disk_dir(setting, run_dir), SHM if shm is None else shm
    if setting != AUTO:
        return MergedDir(fallback, tmpfs=False)
    if not shm.is_dir():
        return MergedDir(fallback, tmpfs=False, note=f"policy_server.merged_dir = 'auto': {shm} does not exist, so "
                         f"merged weights go to {fallback} on disk (slower to write than tmpfs)")
    path = tmpfs_dir(run_dir, run_name, shm)
    need = 2 * need_bytes + MARGIN_BYTES
    mem = (available or mem_available)()
    free = min(usage(shm).free, mem if mem is not None else usage(shm).free) + _size(path)
    if free < need:
        return MergedDir(fallback, tmpfs=False, note=(
            f"policy_server.merged_dir = 'auto': {shm} has {free / 2**20:.0f} MiB free (its free space or the "
            f"available memory, the smaller), less than the "
            f"{need / 2**20:.0f} MiB two merged copies of {need_bytes / 2**20:.0f} MiB need, so merged weights go "
            f"to {fallback} on disk; free {shm}, or set policy_server.merged_dir to a local folder to silence this"))
    return MergedDir(path, tmpfs=True)


def remove_tmpfs(setting: str, run_dir: str | Path, run_name: str, shm: Path | None = None) -> Path | None:
    """Remove the run's tmpfs folder if "auto" may have made one; returns the folder removed, or None."""
    if setting != AUTO:
        return None
    path = tmpfs_dir(run_dir, run_name, shm)
    if not path.exists():
        return None
    shutil.rmtree(path, ignore_errors=True)
    return path


def _size(path: Path) -> int:
    if not path.is_dir():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
