"""Copy a run from local disk to a mounted bucket (`launch.bucket_dir`) as complete files.

The run directory lives on local disk: checkpoints are renamed into place, the state files are replaced
atomically, metrics.jsonl is appended to and its mtime is the supervisor's heartbeat, and none of that is
promised by a FUSE-mounted bucket. The bucket only receives copies, written so that a reader can tell a
finished file from one being written without a rename on the bucket:
- every file is written in place, once, after its local original is complete;
- within a directory the `.safetensors` files come last, so a checkpoint whose adapter weights are complete has
  every other file in place; the eval watcher checks those bytes against the safetensors header
  (`eval/checkpoints.py`), so a half-copied adapter is never loaded.
A file already copied is copied again only when its local original changed since (newer mtime).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

SKIP = ("merged", ".vllm_lora")
"""Never copied: merged weights for vLLM's reload (about 3 GB a sync) and TRL's adapter staging."""


def _stale(src: Path, dst: Path) -> bool:
    try:
        d = dst.stat()
    except FileNotFoundError:
        return True
    s = src.stat()
    return d.st_size != s.st_size or d.st_mtime_ns < s.st_mtime_ns


def copy_tree(src: str | Path, dst: str | Path, skip: tuple[str, ...] = SKIP) -> list[Path]:
    """Copy the files under `src` missing or stale in `dst` (directories in sorted order, a directory's
    `.safetensors` last); hidden and in-progress names (`.x`, `*.tmp`) and `skip` are left out. Returns what
    was copied."""
    src, dst = Path(src), Path(dst)
    if src.is_file():
        return _copy(src, dst)
    copied: list[Path] = []
    if not src.is_dir():
        return copied
    entries = sorted((p for p in src.iterdir() if p.name not in skip and not p.name.startswith(".")
                      and not p.name.endswith(".tmp")), key=lambda p: (p.suffix == ".safetensors", p.name))
    for p in entries:
        if p.is_dir():
            copied += copy_tree(p, dst / p.name, skip)
        elif p.is_file():
            copied += _copy(p, dst / p.name)
    return copied


def _copy(src: Path, dst: Path) -> list[Path]:
    if not _stale(src, dst):
        return []
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)  # no copystat: a bucket mount may refuse chmod/utime; dst's own mtime is later anyway
    return [dst]


def bucket_run_dir(bucket_dir: str, run_name: str) -> Path | None:
    """`<bucket_dir>/<run_name>`, or None when no bucket is set."""
    return Path(bucket_dir) / run_name if bucket_dir else None


def copy_run(run_dir: str | Path, bucket: Path | None) -> list[Path]:
    """The whole run (less SKIP) to the bucket; a failure is logged, never raised: the run on local disk is
    complete, and the caller is usually finishing or handling another error."""
    if bucket is None:
        return []
    try:
        return copy_tree(run_dir, bucket)
    except OSError as e:
        log.error("copying %s to the bucket %s failed: %s; the run is complete on local disk", run_dir, bucket, e)
        return []
