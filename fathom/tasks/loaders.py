"""Tasks from outside the generators: a local JSONL file or a Hub dataset repo (OOLONG, S-NIAH, ...).

Each row needs a question, a context and an answer; field names are configurable so public
long-context sets load without conversion. Loaded tasks are registered, so `get_task(id)`
finds them in this process only; `fathom tasks import` (tasks/store.py) pins them where every
process (env server, trainer, evaluator) can find them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from pydantic import ValidationError

from fathom.tasks.generate import register, registered
from fathom.tasks.record import CHARS_PER_TOKEN, Gold, Task, TaskMetadata

MAX_CONTEXT_CHARS = 50_000_000
"""A row's context past this is refused (5x the largest generated task); raise it with max_context_chars=."""

DEFAULT_FIELDS = {"id": "id", "question": "question", "context": "context", "answer": "answer",
                  "aliases": "aliases", "type": "answer_type", "family": "family"}


JUDGED_TYPES = ("free", "freeform", "free-form", "free_form", "judge", "llm", "rouge", "f1")
"""Answer types that need a judge model or a soft text metric: refused, since a training reward must be checkable."""


def _row_to_task(row: Any, n: int, source: str, fields: dict[str, str], prefix: str,
                 max_context_chars: int = MAX_CONTEXT_CHARS, *, answer_type: str = "", list_answers: str = "set",
                 token_budget: int = 4000, family: str = "external") -> Task:
    f = {**DEFAULT_FIELDS, **fields}
    where = f"{source} row {n}"
    if not isinstance(row, dict):
        raise ValueError(f"{where} is a JSON {type(row).__name__}, not an object; each row must be one task object "
                         "with question, context and answer")
    missing = [f[k] for k in ("question", "context", "answer") if row.get(f[k]) in (None, "")]
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)}; map other column names with fields={{...}}")
    for key in ("question", "context"):
        if not isinstance(row[f[key]], str):
            raise ValueError(f"{where}: {f[key]!r} must be a string, got a {type(row[f[key]]).__name__}")
    for key, kinds in (("id", (str, int)), ("family", (str,)), ("aliases", (list,))):
        value = row.get(f[key])
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
            raise ValueError(f"{where}: {f[key]!r} must be {' or '.join(k.__name__ for k in kinds)}, "
                             f"got {type(value).__name__}")
    budget = row.get("token_budget")
    if budget is not None and (type(budget) is not int or budget <= 0):
        raise ValueError(f"{where}: token_budget must be a positive integer, got {budget!r}")
    if len(row[f["context"]]) > max_context_chars:
        raise ValueError(f"{where}: context is {len(row[f['context']]):,} characters, over the "
                         f"{max_context_chars:,} cap; split the document or pass max_context_chars=")
    gold_raw = row[f["answer"]]
    if isinstance(gold_raw, dict):  # our own to_dict() format
        try:
            gold = Gold.model_validate(gold_raw)
        except ValidationError as e:
            raise ValueError(f"{where}: answer object is not a gold record: {e.errors(include_url=False)[0]['msg']} "
                             f"at {'.'.join(str(p) for p in e.errors()[0]['loc'])}") from None
    elif isinstance(gold_raw, list) and list_answers == "aliases":
        spellings = [str(x) for x in gold_raw if str(x).strip()]
        if not spellings:
            raise ValueError(f"{where}: {f['answer']!r} is an empty list; each row needs at least one answer")
        atype = _answer_type(row.get(f["type"]) or answer_type or "string", where, f["type"])
        gold = Gold(answer=spellings[0], aliases=spellings[1:] + [str(a) for a in row.get(f["aliases"]) or []],
                    type=atype)
    elif isinstance(gold_raw, list):
        items = [str(x) for x in gold_raw]
        gold = Gold(answer="; ".join(items), type="set", items=items)
    else:
        atype = _answer_type(row.get(f["type"]) or answer_type
                             or ("number" if isinstance(gold_raw, (int, float)) else "string"), where, f["type"])
        gold = Gold(answer=str(gold_raw), aliases=[str(a) for a in row.get(f["aliases"]) or []], type=atype)
    context = str(row[f["context"]])
    task_id = str(row.get(f["id"]) or f"{prefix}-{n}")
    meta = TaskMetadata(length_chars=len(context), est_tokens=len(context) // CHARS_PER_TOKEN, difficulty=1,
                        distractors=False, generator_version="external", seed=n, split="external",
                        template=f"external/{source}", haystack=f"external/{source}",
                        token_budget=int(row.get("token_budget") or token_budget))
    return Task(task_id, str(row.get(f["family"]) or family), str(row[f["question"]]), context, gold, meta)


def _answer_type(atype: Any, where: str, column: str) -> str:
    if str(atype).lower() in JUDGED_TYPES:
        raise ValueError(f"{where}: answer type {atype!r} needs a judge model or a soft text metric, which the "
                         "training reward does not use; map the answer to string (exact after normalisation, with "
                         "aliases), number (tolerance) or set (F1), or leave this row out")
    if atype not in ("number", "string", "set"):
        raise ValueError(f"{where}: answer type {atype!r} (column {column!r}) must be number, string or set")
    return atype


def from_rows(rows: Iterable[dict[str, Any]], source: str, fields: dict[str, str] | None = None,
              *, limit: int | None = None, id_prefix: str | None = None,
              max_context_chars: int = MAX_CONTEXT_CHARS) -> list[Task]:
    """Tasks from row dicts; rows without an id get `{id_prefix}-{row number}`."""
    out = []
    for n, row in enumerate(rows):
        if limit is not None and n >= limit:
            break
        out.append(_row_to_task(row, n, source, fields or {}, id_prefix or Path(source).stem, max_context_chars))
    ids = [t.id for t in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{source} has duplicate task ids; give each row a unique {(fields or {}).get('id', 'id')!r}")
    for t in out:
        known = registered(t.id)
        if known is not None and (known.question, known.context, known.gold) != (t.question, t.context, t.gold):
            raise ValueError(f"{source}: task id {t.id!r} is already loaded with other content "
                             f"({known.metadata.template}); give the rows unique ids")
    register(out)
    return out


def load_jsonl(path: str | Path, fields: dict[str, str] | None = None, *, limit: int | None = None,
               max_context_chars: int = MAX_CONTEXT_CHARS) -> list[Task]:
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

    return from_rows(rows(), str(p), fields, limit=limit, max_context_chars=max_context_chars)


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
