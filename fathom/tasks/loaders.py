"""Tasks from outside the generators: a local JSONL file or a Hub dataset repo (OOLONG, S-NIAH, ...).

Each row needs a question, a context and an answer; field names are configurable so public
long-context sets load without conversion. Loaded tasks are registered, so `get_task(id)`
finds them in this process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from fathom.tasks.generate import register
from fathom.tasks.record import CHARS_PER_TOKEN, Gold, Task, TaskMetadata

DEFAULT_FIELDS = {"id": "id", "question": "question", "context": "context", "answer": "answer",
                  "aliases": "aliases", "type": "answer_type", "family": "family"}


def _row_to_task(row: dict[str, Any], n: int, source: str, fields: dict[str, str], prefix: str) -> Task:
    f = {**DEFAULT_FIELDS, **fields}
    where = f"{source} row {n}"
    missing = [f[k] for k in ("question", "context", "answer") if row.get(f[k]) in (None, "")]
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)}; map other column names with fields={{...}}")
    gold_raw = row[f["answer"]]
    if isinstance(gold_raw, dict):  # our own to_dict() format
        gold = Gold.model_validate(gold_raw)
    elif isinstance(gold_raw, list):
        items = [str(x) for x in gold_raw]
        gold = Gold(answer="; ".join(items), type="set", items=items)
    else:
        atype = row.get(f["type"]) or ("number" if isinstance(gold_raw, (int, float)) else "string")
        if atype not in ("number", "string", "set"):
            raise ValueError(f"{where}: answer type {atype!r} must be number, string or set")
        gold = Gold(answer=str(gold_raw), aliases=[str(a) for a in row.get(f["aliases"]) or []], type=atype)
    context = str(row[f["context"]])
    task_id = str(row.get(f["id"]) or f"{prefix}-{n}")
    meta = TaskMetadata(length_chars=len(context), est_tokens=len(context) // CHARS_PER_TOKEN, difficulty=1,
                        distractors=False, generator_version="external", seed=n, split="external",
                        template=f"external/{source}", haystack=f"external/{source}",
                        token_budget=int(row.get("token_budget") or 4000))
    return Task(task_id, str(row.get(f["family"]) or "external"), str(row[f["question"]]), context, gold, meta)


def from_rows(rows: Iterable[dict[str, Any]], source: str, fields: dict[str, str] | None = None,
              *, limit: int | None = None, id_prefix: str | None = None) -> list[Task]:
    """Tasks from row dicts; rows without an id get `{id_prefix}-{row number}`."""
    out = []
    for n, row in enumerate(rows):
        if limit is not None and n >= limit:
            break
        out.append(_row_to_task(row, n, source, fields or {}, id_prefix or Path(source).stem))
    ids = [t.id for t in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{source} has duplicate task ids; give each row a unique {(fields or {}).get('id', 'id')!r}")
    register(out)
    return out


def load_jsonl(path: str | Path, fields: dict[str, str] | None = None, *, limit: int | None = None) -> list[Task]:
    """Tasks from a JSON-lines file: one object per line with question, context and answer."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"task file {str(p)!r} does not exist")

    def rows() -> Iterable[dict[str, Any]]:
        with p.open() as fh:
            for i, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{p}:{i} is not valid JSON ({e.msg}); each line must be one task object") from None

    return from_rows(rows(), str(p), fields, limit=limit)


def load_hub(repo_id: str, *, split: str = "test", config: str | None = None, fields: dict[str, str] | None = None,
             limit: int | None = None, revision: str | None = None) -> list[Task]:
    """Tasks from a Hub dataset repo (needs network), e.g. an OOLONG or S-NIAH export, mapped by `fields`."""
    from datasets import load_dataset  # heavy; only when actually loading from the Hub

    ds = load_dataset(repo_id, config, split=split, revision=revision, streaming=True)
    return from_rows(ds, f"hub:{repo_id}/{split}", fields, limit=limit,
                     id_prefix=f"{Path(repo_id.rstrip('/')).name}/{split}")


def write_jsonl(tasks: Iterable[Task], path: str | Path) -> Path:
    """Write tasks (with contexts and gold) in the format load_jsonl reads."""
    p = Path(path)
    with p.open("w") as fh:
        for t in tasks:
            d = t.to_dict()
            d["answer"] = d.pop("gold")
            fh.write(json.dumps(d) + "\n")
    return p
