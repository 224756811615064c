"""Where checkpoints come from, and when one is complete enough to load.

The trainer writes `checkpoint-N/` under a temporary name and renames it, so a visible directory
is complete on a local disk. A bucket mounted as a job volume or a Hub repo can still show files
mid-upload, so completeness is also checked on the bytes: both adapter files present and the
safetensors file exactly as long as its own header says.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Protocol

CHECKPOINT = re.compile(r"checkpoint-(\d+)")
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def safetensors_complete(path: Path) -> bool:
    """True when the file's size equals header length + header + the furthest tensor's end offset."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n <= 0 or 8 + n > size:
                return False
            header = json.loads(fh.read(n))
    except (OSError, struct.error, ValueError):
        return False
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)]
    return bool(ends) and size == 8 + n + max(ends)


def adapter_complete(d: Path) -> bool:
    if not all((d / f).is_file() for f in ADAPTER_FILES):
        return False
    try:
        json.loads((d / "adapter_config.json").read_text())
    except (OSError, ValueError):
        return False
    return safetensors_complete(d / "adapter_model.safetensors")


class CheckpointSource(Protocol):
    def describe(self) -> str: ...

    def complete(self) -> dict[int, Path]:
        """Complete checkpoints now visible, step -> local adapter directory."""
        ...


class DirSource:
    """`<dir>/checkpoint-N/` on a local disk or a mounted bucket; a run directory means its `checkpoints/`."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def describe(self) -> str:
        return str(self.root)

    def complete(self) -> dict[int, Path]:
        # Looked up on every poll: the trainer may create `checkpoints/` after the watcher started.
        root = self.root / "checkpoints" if (self.root / "checkpoints").is_dir() else self.root
        if not root.is_dir():
            return {}  # the trainer has not written its first checkpoint yet
        out = {}
        for d in root.iterdir():
            m = CHECKPOINT.fullmatch(d.name)  # `checkpoint-5.tmp` and the like are still being written
            if m and d.is_dir() and adapter_complete(d):
                out[int(m.group(1))] = d
        return out


class HubSource:
    """`checkpoint-N/` folders of a Hub model repo, downloaded into `cache` once each is complete."""

    def __init__(self, repo_id: str, cache: str | Path, revision: str | None = None):
        self.repo_id, self.cache, self.revision = repo_id, Path(cache), revision

    def describe(self) -> str:
        return f"hf://{self.repo_id}"

    def steps(self) -> list[int]:
        """Steps whose folder holds both adapter files on the Hub (an upload commits them together)."""
        from huggingface_hub import list_repo_files

        files = set(list_repo_files(self.repo_id, revision=self.revision))
        steps = {int(m.group(1)) for f in files if (m := CHECKPOINT.fullmatch(f.split("/")[0]))}
        return sorted(s for s in steps if all(f"checkpoint-{s}/{f}" in files for f in ADAPTER_FILES))

    def fetch(self, step: int) -> Path | None:
        from huggingface_hub import snapshot_download

        local = self.cache / f"checkpoint-{step}"
        if not adapter_complete(local):
            snapshot_download(self.repo_id, revision=self.revision, local_dir=self.cache,
                              allow_patterns=[f"checkpoint-{step}/*"])
        return local if adapter_complete(local) else None

    def complete(self) -> dict[int, Path]:
        out = {}
        for step in self.steps():
            local = self.fetch(step)
            if local is not None:
                out[step] = local
        return out


def source_for(spec: str, cache: str | Path) -> CheckpointSource:
    """`hf://owner/repo` is a Hub repo; anything else a local directory (it may not exist yet: the
    trainer creates it with its first checkpoint)."""
    if spec.startswith("hf://"):
        return HubSource(spec[5:], cache)
    return DirSource(Path(spec).expanduser())
