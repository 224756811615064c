"""Row streams of external task sources, and presets for the field names of public long-context sets.

A local JSONL file is read here, line by line in binary, hashing the bytes as they pass: one row's
context is in memory at a time. Parquet, CSV and Hub datasets stream through `datasets`
(`streaming=True`), which holds one record batch (a Parquet row group) at a time.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

PRESETS: dict[str, dict[str, Any]] = {
    "longbench": {
        "fields": {"id": "_id", "question": "input", "context": "context", "answer": "answers", "family": "dataset"},
        "list_answers": "aliases", "repo": "THUDM/LongBench",
        "about": "LongBench (v1): `answers` is a list of accepted answers; `dataset` names the sub-task.",
    },
    "babilong": {
        "fields": {"question": "question", "context": "input", "answer": "target"},
        "list_answers": "aliases", "repo": "RMT-team/babilong",
        "about": "BABILong: bAbI facts spread through PG19 text; configs are lengths (0k..1M), splits tasks (qa1..).",
    },
}
"""Field maps (our field -> the set's column) of known public sets; a source's own `fields` override them."""


class SourceError(ValueError):
    """A source that cannot be read: missing file, unknown kind or preset, unresolvable revision."""


@dataclass
class RowStream:
    label: str
    """How errors name the source: the file path or `hub:owner/name/split`."""
    rows: Iterator[tuple[Any, int]]
    """(row, bytes it took in the source) pairs, in source order."""
    total_bytes: int | None
    """Size of the source for a progress bar, when known."""
    revision: Callable[[], str]
    """What pins the source's content; call it after the rows are consumed (a JSONL hashes as it streams)."""
    meta: dict[str, Any] = field(default_factory=dict)


def resolve_preset(src: Any) -> tuple[dict[str, str], str]:
    """(field map, list-answer mode) of a TaskSource: the preset's, overridden by the source's own."""
    base: dict[str, Any] = {}
    if src.preset:
        if src.preset not in PRESETS:
            raise SourceError(f"task source {src.name!r}: preset {src.preset!r} is unknown; choose one of "
                              f"{', '.join(PRESETS)} or map the columns with fields = {{...}}")
        base = PRESETS[src.preset]
    return {**base.get("fields", {}), **src.fields}, src.list_answers or base.get("list_answers", "set")


def file_sha256(path: Path, chunk: int = 8 << 20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def _jsonl(path: Path) -> RowStream:
    h = hashlib.sha256()

    def rows() -> Iterator[tuple[Any, int]]:
        with path.open("rb") as fh:
            for i, line in enumerate(fh, start=1):
                h.update(line)
                size = len(line)
                if size < 64 and not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as e:
                    raise SourceError(f"{path}:{i} is not valid JSON ({getattr(e, 'msg', e)}); each line must be "
                                      "one task object with question, context and answer") from None
                del line  # the parsed row holds the context now; one copy, not two
                yield row, size
                del row  # not held while the next line is read

    return RowStream(str(path), rows(), path.stat().st_size, lambda: f"sha256:{h.hexdigest()}")


def _dir_sha256(root: Path) -> str:
    """One digest over a local dataset directory's files (relative paths and bytes), sorted."""
    h = hashlib.sha256()
    for p in sorted(x for x in root.rglob("*") if x.is_file() and ".git" not in x.parts):
        h.update(str(p.relative_to(root)).encode() + b"\0" + file_sha256(p).encode())
    return h.hexdigest()


def _datasets_rows(ds: Any) -> Iterator[tuple[Any, int]]:
    for row in ds:
        yield row, sum(len(v) for v in row.values() if isinstance(v, (str, bytes)))
        del row


def _hub_revision(repo: str, revision: str | None) -> str:
    if revision and len(revision) == 40 and all(c in "0123456789abcdef" for c in revision):
        return revision
    try:
        from huggingface_hub import HfApi

        return HfApi().dataset_info(repo, revision=revision).sha or ""
    except Exception as e:  # noqa: BLE001 - offline, private or unknown repo: the user pins it instead
        raise SourceError(f"hub:{repo}: cannot resolve revision {revision or 'main'!r} to a commit ({e}); "
                          "give revision = a 40-character commit sha") from None


def _local_file(src: Any) -> Path:
    p = Path(src.path).expanduser()
    if not p.is_file():
        raise SourceError(f"task source {src.name!r}: file {str(p)!r} does not exist; fix tasks.sources path")
    return p


def open_source(src: Any) -> RowStream:
    """A TaskSource's rows, streamed."""
    if src.kind == "jsonl":
        return _jsonl(_local_file(src))
    from datasets import load_dataset  # heavy: only for the kinds that read through it

    if src.kind in ("parquet", "csv"):
        p = _local_file(src)
        digest = file_sha256(p)
        ds = load_dataset(src.kind, data_files=str(p), split="train", streaming=True)
        return RowStream(str(p), _datasets_rows(ds), p.stat().st_size, lambda: f"sha256:{digest}")
    if src.kind == "hub":
        local = Path(src.path).expanduser() if src.path else None
        if local is not None and not local.is_dir():
            raise SourceError(f"task source {src.name!r}: {str(local)!r} is not a directory laid out like a Hub "
                              "dataset repo; give repo = 'owner/name' or fix path")
        target = str(local) if local is not None else src.repo
        rev = f"dir-sha256:{_dir_sha256(local)}" if local is not None else _hub_revision(src.repo, src.revision)
        try:
            ds = load_dataset(target, src.config, split=src.split,
                              revision=None if local is not None else rev, streaming=True)
        except Exception as e:  # noqa: BLE001 - datasets raises many kinds; the user needs the source named
            raise SourceError(f"task source {src.name!r}: cannot open {target} config={src.config!r} "
                              f"split={src.split!r}: {e}") from None
        return RowStream(f"hub:{target}/{src.split}", _datasets_rows(ds), None, lambda: rev,
                         meta={"repo": src.repo or None, "config": src.config, "split": src.split})
    raise SourceError(f"task source {src.name!r}: kind {src.kind!r} must be jsonl, parquet, csv or hub")


def source_from_spec(spec: str, configured: list[Any], **given: Any) -> Any:
    """A TaskSource from the command line: a configured source's name, a file path (kind from its suffix), a
    local dataset directory, or `hub:owner/name`; `given` options (None = unset) override its fields."""
    from fathom.config.tasks import TaskSource

    given = {k: v for k, v in given.items() if v not in (None, {}, "")}
    named = next((s for s in configured if s.name == spec), None)
    if named is not None:
        base = named.model_dump()
    elif spec.startswith("hub:"):
        base = {"kind": "hub", "repo": spec[4:]}
    else:
        p = Path(spec).expanduser()
        kind = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".csv": "csv"}.get(p.suffix.lower())
        if p.is_dir():
            kind = "hub"
        if kind is None:
            known = ", ".join(s.name for s in configured) or "none"
            raise SourceError(f"source {spec!r} is not a configured tasks.sources name ({known}), a .jsonl/.parquet/"
                              ".csv file, a dataset directory or hub:owner/name; pass one of those (or --kind)")
        base = {"kind": kind, "path": str(p)}
    base.setdefault("name", given.get("name") or (Path(spec).stem if named is None else spec))
    try:
        return TaskSource.model_validate({**base, **given})
    except ValueError as e:
        raise SourceError(f"source {spec!r}: {e}") from None
