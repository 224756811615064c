"""The SFT anchor: a small next-token loss on the warm start's own teacher rows, added to every GRPO micro-batch.

Why: GRPO here trains on the families the policy sometimes solves (needle, kv_chain). The programs of all families
share their opening, so updates on those families also move the policy on the ones it does not train on, and a
GRPO stage that left a family out of its training set lost held-out tasks of that family that SFT had solved
(docs/results.md). Mixing the SFT loss back in while the policy-gradient step runs (InstructGPT's PPO-ptx) pulls
the adapter toward what the teacher showed, while the advantage term moves it where rewards differ.
`sft_anchor/nll` in metrics.jsonl is that loss; TRL's logged `loss` includes coef x it.

On every family's rows it also re-teaches which program goes with which question: the teacher pairs needle
questions with the one-hop program, and at coefficient 1.0 held-out kv_chain moved onto it (docs/trainer.md).
`families` restricts the rows, e.g. to the families GRPO does not train on.

Rows are the ones `fathom sft` trained on (`<run>/sft/data.jsonl`): `input_ids`, `labels` (-100 off the
assistant's tokens, so the anchor's mask is the one set when each token was recorded) and the task's `family`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

IGNORE = -100


class AnchorDataError(ValueError):
    """The SFT anchor's rows file is missing or unusable."""


def load_rows(path: str | Path, families: list[str] | tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The rows of an SFT data file (JSON lines of `input_ids`, `labels` and the task's `family`), only those of
    `families` when it names any; errors name the file and the fix."""
    p = Path(path)
    fix = "point trainer.sft_anchor_data at the data.jsonl `fathom sft` wrote, or set trainer.sft_anchor_coef = 0"
    if not p.is_file():
        raise AnchorDataError(f"SFT anchor data {str(p)!r} does not exist; {fix}")
    rows = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            ids, labels = row["input_ids"], row["labels"]
        except (ValueError, KeyError, TypeError) as e:
            raise AnchorDataError(f"{p}:{n} is not a row of input_ids and labels ({e}); {fix}") from None
        if len(ids) != len(labels):
            raise AnchorDataError(f"{p}:{n}: {len(ids)} input_ids but {len(labels)} labels; {fix}")
        if families and "family" not in row:
            raise AnchorDataError(f"{p}:{n} names no family, so trainer.sft_anchor_families cannot pick rows; "
                                  "re-run `fathom sft` (its rows name their family) or leave the list empty")
        if families and row["family"] not in families:
            continue
        if any(t != IGNORE for t in labels[1:]):  # the first label is never predicted
            rows.append({"input_ids": ids, "labels": labels})
    if not rows:
        which = f" of the families {list(families)}" if families else ""
        raise AnchorDataError(f"SFT anchor data {str(p)!r} has no row{which} with a trained token; {fix}")
    return rows


def rows_path(data: str, init_adapter: str) -> str:
    """Where the anchor's rows are: `data` when named, else the data.jsonl beside `init_adapter` (`fathom sft` writes
    `<out>/adapter` and `<out>/data.jsonl`), else empty."""
    if data:
        return data
    beside = Path(init_adapter).parent / "data.jsonl" if init_adapter else None
    return str(beside) if beside is not None and beside.is_file() else ""


def missing_rows(coef: float, init_adapter: str) -> AnchorDataError:
    where = f"{init_adapter!r} has no data.jsonl beside it" if init_adapter else "trainer.init_adapter is empty"
    return AnchorDataError(f"trainer.sft_anchor_coef is {coef} but trainer.sft_anchor_data is empty and {where}: name "
                           "the data.jsonl `fathom sft` wrote, or set trainer.sft_anchor_coef = 0")


class SftAnchor:
    """Draws one teacher row per call (seeded order, every row once before any repeats) and returns the model's
    mean next-token loss on its labelled tokens."""

    def __init__(self, rows: list[dict[str, list[int]]], coef: float, seed: int = 0):
        self.rows, self.coef = rows, coef
        self._rng = random.Random(seed)
        self._order: list[int] = []

    def next_row(self) -> dict[str, list[int]]:
        if not self._order:
            self._order = list(range(len(self.rows)))
            self._rng.shuffle(self._order)
        return self.rows[self._order.pop()]

    def nll(self, model: Any, device: Any = None) -> Any:
        """Mean negative log-likelihood of one row's labelled tokens (temperature 1, the plain LM head)."""
        import torch

        row = self.next_row()
        ids = torch.tensor([row["input_ids"]], device=device)
        labels = torch.tensor([row["labels"]], device=device)
        return model(input_ids=ids, labels=labels, use_cache=False).loss
