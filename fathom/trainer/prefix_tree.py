"""Shared-prefix rows for the CPU trainer: a group's prompt is forwarded once, not once per sample.

The samples of a GRPO group start with the same prompt (system prompt, task, document preview), and TRL 1.15 packs
each sample whole, so a row forwards that prompt once per sample. `share_row` lays a row out as a prefix tree
instead, in the same tensors TRL's collator builds:
- the row's samples are sorted by their token ids, so a sample shares its longest prefix with the one before it;
- each sample drops the leading tokens it shares with that sample, but never a trained token nor the predecessor of
  its first trained token: every kept token that is trained follows, in the row, the token it is predicted from, so
  TRL's shifted labels, completion mask and advantages stay right position by position;
- a kept token keeps its position id, which is its depth in the tree.

`tree_runs` recovers the tree from the position ids alone, which is all TRL hands the attention: a run of the row
(positions counting up by one) that starts at depth d > 0 continues the path of the latest earlier tokens at depths
0..d-1 (in this layout, as in any depth-first layout, those are its ancestors). A run starting at 0, or one whose
ancestors the row does not hold, is a sequence of its own: TRL's flat rows are all such runs, so they attend exactly
as before. `cpu_compat.segment_sdpa` attends along these paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def as_ints(x: Any) -> list[int]:
    """Token ids (a tensor or any sequence of ints) as a list of ints."""
    return x.tolist() if hasattr(x, "tolist") else [int(v) for v in x]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def share_row(samples: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    """The row's samples in tree order and how many leading tokens each drops (module docstring). Samples are TRL's:
    `input_ids` and `completion_mask` (lists or tensors)."""
    ordered = sorted(samples, key=lambda s: as_ints(s["input_ids"]))
    drops, prev = [], None
    for s in ordered:
        ids, mask = as_ints(s["input_ids"]), as_ints(s["completion_mask"])
        first_trained = next((i for i, m in enumerate(mask) if m), len(ids))
        shared = 0 if prev is None else common_prefix(prev, ids)
        drops.append(max(0, min(shared, first_trained - 1, len(ids) - 1)))
        prev = ids
    return ordered, drops


def tree_runs(position_ids: Sequence[int]) -> list[tuple[int, int, list[int]]]:
    """(start, end, ancestors) per run of one row: a run is where positions count up by one, and `ancestors` are the
    row indices of the tokens before it on its path (empty for a sequence of its own)."""
    pos = as_ints(position_ids)
    starts = [0, *(i for i in range(1, len(pos)) if pos[i] != pos[i - 1] + 1), len(pos)]
    runs, last = [], []  # last[k]: row index of the latest token at depth k on the current path, -1 unknown
    for s, e in zip(starts, starts[1:]):
        d = pos[s]
        ancestors = last[:d] if 0 < d <= len(last) and min(last[:d]) >= 0 else []
        runs.append((s, e, ancestors))
        last = (ancestors or [-1] * d) + list(range(s, e))
    return runs


__all__ = ["as_ints", "common_prefix", "share_row", "tree_runs"]
