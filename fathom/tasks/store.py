"""The imported task store: pinned manifests and content-addressed contexts under $FATHOM_HOME/tasks/.

    splits/NAME.json         ids, question, gold, SHA-256 of each context and task, the source's revision
    objects/ab/abcdef...     each context's UTF-8 bytes, named by their SHA-256

Task `NAME-N` is row N of split NAME. Every process (env server, trainer, evaluator) resolves it
from these files, never from memory another process loaded, and checks the context's SHA-256 on
every read, so a file changed on disk is refused instead of served.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from fathom.tasks.loaders import MAX_CONTEXT_CHARS, _row_to_task
from fathom.tasks.record import CHARS_PER_TOKEN, SPLITS, Gold, Task, TaskMetadata, task_digest
from fathom.tasks.sources import SourceError, open_source, resolve_preset
from fathom.tasks.splits import ManifestError, render

STORE_VERSION = "1"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_ID = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9_-]{0,63})-(?P<row>\d+)")
_settings: dict[str, str] = {"root": ""}
_UMASK = os.umask(0o022)
os.umask(_UMASK)
_FILE_MODE = 0o666 & ~_UMASK
"""mkstemp makes 0600 files; the store is read by other users too (the container's uid 1000), so files get the
mode open() would give them."""
_manifests: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}


class StoreError(ManifestError):
    """An imported split that is missing, malformed, refused on re-import, or whose stored files changed."""


def set_root(path: str | Path | None) -> None:
    _settings["root"] = str(path or "")


def root() -> Path:
    from fathom.config.base import fathom_home

    return Path(_settings["root"]).expanduser() if _settings["root"] else fathom_home() / "tasks"


def manifest_file(name: str) -> Path:
    return root() / "splits" / f"{name}.json"


def object_file(sha: str) -> Path:
    return root() / "objects" / sha[:2] / sha


def check_name(name: str) -> str:
    from fathom.tasks.generate import FAMILIES

    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise StoreError(f"split name {name!r} must be 1-64 letters, digits, '_' or '-', starting with a letter "
                         "or digit; pass another --name")
    if name in SPLITS or name in FAMILIES:
        raise StoreError(f"split name {name!r} is taken by a built-in split or task family; pass another --name")
    return name


def parse(task_id: str) -> tuple[str, int] | None:
    """(split name, row) of an imported task id like `mydocs-3`; None for any other id."""
    m = _ID.fullmatch(task_id) if isinstance(task_id, str) else None
    return (m.group("name"), int(m.group("row"))) if m else None


def names() -> list[str]:
    d = root() / "splits"
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


def missing(sources: list[Any], role: str | None = None) -> list[str]:
    """Names of configured sources (with `role`, when given) not yet imported into the store."""
    return [s.name for s in sources if (role is None or role in s.roles) and not has(s.name)]


def has(name: str) -> bool:
    return manifest_file(name).is_file()


def manifest(name: str) -> dict[str, Any]:
    """The split's manifest, re-read whenever its file changes."""
    path = manifest_file(name)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise StoreError(f"imported split {name!r} is not in the task store {str(root())!r}; import it with "
                         f"`fathom tasks import {name}` (or point tasks.store_dir at the store that holds it)") from None
    key = (st.st_mtime_ns, st.st_size)
    hit = _manifests.get(name)
    if hit is not None and hit[0] == key:
        return hit[1]
    try:
        data = json.loads(path.read_text())
        assert data["split"] == name and data["kind"] == "imported" and isinstance(data["tasks"], list)
    except (ValueError, KeyError, AssertionError, TypeError) as e:
        raise StoreError(f"manifest {str(path)!r} is malformed ({e!r}); re-import it with "
                         f"`fathom tasks import {name} --force`") from None
    _manifests[name] = (key, data)
    return data


def _row(task_id: str) -> tuple[str, dict[str, Any]]:
    parsed = parse(task_id)
    if parsed is None:
        raise KeyError(f"unknown task id {task_id!r}: expected NAME-ROW such as mydocs-3")
    name, n = parsed
    if not has(name):
        raise KeyError(f"unknown task id {task_id!r}: no imported split {name!r} in {str(root())!r}; run "
                       f"`fathom tasks import {name}` or check tasks.store_dir")
    rows = manifest(name)["tasks"]
    if n >= len(rows) or rows[n]["id"] != task_id:
        raise KeyError(f"unknown task id {task_id!r}: imported split {name!r} has rows {name}-0..{name}-{len(rows) - 1}")
    return name, rows[n]


def describe(task_id: str) -> tuple[str, int]:
    """(family, context length) from the manifest alone: no context is read."""
    _, row = _row(task_id)
    return row["family"], row["length"]


def load(task_id: str) -> Task:
    """The imported task, its context read from the store and checked against the pinned SHA-256."""
    name, row = _row(task_id)
    path = object_file(row["context_sha256"])
    fix = f"re-import it with `fathom tasks import {name} --force`, or restore the file"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise StoreError(f"task {task_id}: its stored context {str(path)!r} is missing; {fix}") from None
    got = hashlib.sha256(data).hexdigest()
    if got != row["context_sha256"]:
        raise StoreError(f"task {task_id}: its stored context {str(path)!r} changed on disk (sha256 {got[:12]}, "
                         f"pinned {row['context_sha256'][:12]}); {fix}")
    context = data.decode()
    del data
    meta = TaskMetadata(length_chars=len(context), est_tokens=len(context) // CHARS_PER_TOKEN, difficulty=1,
                        distractors=False, generator_version="external", seed=parse(task_id)[1], split=name,
                        template=f"external/{name}", haystack=f"external/{name}", token_budget=row["token_budget"],
                        extra={"source_id": row.get("source_id")})
    return Task(task_id, row["family"], row["question"], context, Gold.model_validate(row["gold"]), meta)


def load_split(name: str) -> list[str]:
    return [r["id"] for r in manifest(name)["tasks"]]


def verify(name: str) -> dict[str, int]:
    """Read every context of the split and check its SHA-256 and the task's; raises StoreError on the first change."""
    checked = 0
    for r in manifest(name)["tasks"]:
        t = load(r["id"])
        if t.digest() != r["sha256"]:
            raise StoreError(f"task {r['id']}: its manifest entry does not match its content (sha256); "
                             f"re-import it with `fathom tasks import {name} --force`")
        checked += 1
    return {"checked": checked}


def _write_whole(path: Path, data: bytes) -> None:
    """Write to a temporary file beside `path`, then rename: no reader sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, _FILE_MODE)
    os.replace(tmp, path)


def _put(sha: str, data: bytes, force: bool) -> None:
    path = object_file(sha)
    if not force and path.is_file() and path.stat().st_size == len(data):
        return  # content-addressed: the same bytes are already there
    _write_whole(path, data)


def _write_manifest(data: dict[str, Any]) -> Path:
    path = manifest_file(data["split"])
    _write_whole(path, render(data).encode())
    return path


def import_source(src: Any, name: str | None = None, *, force: bool = False,
                  progress: Callable[[int, int, int | None], Any] | None = None,
                  max_context_chars: int = MAX_CONTEXT_CHARS) -> dict[str, Any]:
    """Stream a TaskSource's rows, validate each, store its context and pin the split; returns a summary.

    Refuses (StoreError) a re-import that changes or drops a pinned task unless `force`.
    `progress(rows, bytes, total_bytes)` is called after each row.
    """
    name = check_name(name or src.name)
    fields, list_mode = resolve_preset(src)
    old = manifest(name)["tasks"] if has(name) else []
    stream = open_source(src)
    rows: list[dict[str, Any]] = []
    seen = largest = 0
    t0 = time.monotonic()
    for n, (row, size) in enumerate(stream.rows):
        if src.limit is not None and n >= src.limit:
            break
        t = _row_to_task(row, n, stream.label, fields, name, max_context_chars, answer_type=src.answer_type,
                         list_answers=list_mode, token_budget=src.token_budget, family=name)
        del row
        tid = f"{name}-{n}"
        data = t.context.encode()
        sha = hashlib.sha256(data).hexdigest()
        digest = task_digest(tid, t.question, t.gold, data)
        if n < len(old) and old[n]["sha256"] != digest and not force:
            raise StoreError(f"re-import of {name!r} changes pinned task {tid} ({stream.label} row {n}); imported "
                             "splits are pinned like the built-in ones: pass --force to replace it, or import the "
                             "new content under another --name")
        _put(sha, data, force)
        rows.append({"id": tid, "source_id": t.id, "family": t.family, "length": len(t.context),
                     "context_sha256": sha, "sha256": digest,
                     "gold_sha256": hashlib.sha256(t.gold.model_dump_json().encode()).hexdigest(),
                     "question": t.question, "gold": t.gold.model_dump(), "token_budget": t.metadata.token_budget})
        largest = max(largest, len(data))
        seen += size
        del t, data
        if progress:
            progress(n + 1, seen, stream.total_bytes)
    if not rows:
        raise SourceError(f"{stream.label} has no rows; nothing to import")
    if len(rows) < len(old) and not force:
        raise StoreError(f"re-import of {name!r} has {len(rows)} rows where the pinned split has {len(old)}: it "
                         f"would drop {name}-{len(rows)}..{name}-{len(old) - 1}; pass --force to replace the split")
    source = {"kind": src.kind, "path": src.path or None, "repo": src.repo or None, "config": src.config,
              "split": src.split if src.kind == "hub" else None, "preset": src.preset or None, "fields": fields,
              "list_answers": list_mode, "limit": src.limit}
    data = {"split": name, "kind": "imported", "store_version": STORE_VERSION, "source": source,
            "revision": stream.revision(), "n": len(rows), "tasks": rows}
    path = _write_manifest(data)
    wall = time.monotonic() - t0
    return {"split": name, "manifest": str(path), "n": len(rows), "revision": data["revision"], "bytes": seen,
            "largest_context_bytes": largest, "wall_s": round(wall, 3), "replaced": bool(old)}
