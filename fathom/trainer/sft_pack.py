"""Shared-prefix SFT steps: an optimizer step's rows forwarded as one packed row, a prefix two rows share forwarded once.

SFT rows all start with the same system prompt, and the rows of one episode share its first turns, so forwarding each
row on its own computes those tokens once per row. `pack_rows` lays a step's rows out as the GRPO trainer lays out a
row's samples (`prefix_tree.share_row`: sorted by token ids, each row leaving out the leading tokens it shares with
the row before it, never a trained token nor the token that predicts the first one), with position ids that are each
token's depth, so `cpu_compat.segment_sdpa` attends a branch to the prefix it shares and causally to itself.

The loss is unchanged: TRL's SFT loss is the sum of the trained tokens' log-probabilities over the step's trained-token
count (transformers' `num_items_in_batch`, counted over `labels[..., 1:]` of each micro-batch), and a packed row keeps
every trained token right after the token it is predicted from, so the sum and the count are the same as over the
rows one at a time. A run's first token follows another row's last one in the packed row, so it is never a label
(it never is on its own either: `share_row` keeps an untrained token before every trained one).

`StepTally` counts what each step forwarded against the tokens of its rows (`forwarded_token_frac`) and the
(length, ancestors) of every sequence it attended, for the FLOP count (`limits.train_flops`).
"""

from __future__ import annotations

from typing import Any

from fathom.trainer.prefix_tree import as_ints, share_row, tree_runs

IGNORE = -100
"""The label of a token that is not trained (transformers' and TRL's ignore index)."""


def pack_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One packed row (`input_ids`, `labels`, `position_ids`, each [1, tokens]) of `rows` (`input_ids` and `labels`,
    -100 where untrained), each row leaving out what it shares with the one before it (module docstring)."""
    import torch

    samples = []
    for r in rows:
        labels = as_ints(r["labels"])
        samples.append({"input_ids": as_ints(r["input_ids"]), "labels": labels,
                        "completion_mask": [int(t != IGNORE) for t in labels]})
    ordered, drops = share_row(samples)
    ids: list[int] = []
    labels: list[int] = []
    positions: list[int] = []
    for s, d in zip(ordered, drops):
        n = len(s["input_ids"])
        ids += s["input_ids"][d:]
        labels += [IGNORE, *s["labels"][d + 1:]]
        positions += range(d, n)
    return {"input_ids": torch.tensor([ids]), "labels": torch.tensor([labels]),
            "position_ids": torch.tensor([positions])}


class SharedPrefixCollator:
    """The data collator of shared-prefix SFT steps: a batch of rows (one optimizer step's) -> `pack_rows`."""

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        if not examples:
            raise ValueError("SharedPrefixCollator got an empty batch: give it one optimizer step's rows")
        return pack_rows(examples)


def sequences(batch: dict[str, Any]) -> list[tuple[int, int]]:
    """(tokens forwarded, ancestor tokens attended) of each sequence a batch holds: a packed row (position ids, no
    attention mask) per run of `prefix_tree.tree_runs`; a padded batch per row, its real tokens (attention mask)."""
    mask = batch.get("attention_mask")
    if mask is not None:
        return [(n, 0) for n in as_ints(mask.sum(-1))]
    return [(e - s, len(ancestors)) for row in batch["position_ids"] for s, e, ancestors in tree_runs(row)]


class StepTally:
    """What the SFT steps forwarded, fed each micro-batch as it is trained (`add`)."""

    def __init__(self) -> None:
        self.runs: list[tuple[int, int]] = []
        """(tokens forwarded, ancestor tokens attended) of every sequence trained so far."""
        self.row_tokens = 0
        """Tokens of the rows trained so far, each row counted whole."""
        self.forwarded = 0
        """Tokens forwarded so far, padding included."""
        self._since = (0, 0)

    def add(self, batch: dict[str, Any]) -> None:
        runs = sequences(batch)
        self.runs += runs
        # A run holds its row's last len tokens, after its ancestors: the row is ancestors + len tokens long, and a
        # run that continues none (ancestors 0) is a whole row.
        self.row_tokens += sum(n + a for n, a in runs)
        self.forwarded += int(batch["input_ids"].numel())

    def frac(self) -> float | None:
        """Forwarded tokens over row tokens, all steps so far; None before any."""
        return round(self.forwarded / self.row_tokens, 4) if self.row_tokens else None

    def take(self) -> float | None:
        """Forwarded over row tokens of the micro-batches added since the last `take` (one logged step)."""
        rows, fwd = self.row_tokens - self._since[0], self.forwarded - self._since[1]
        self._since = (self.row_tokens, self.forwarded)
        return round(fwd / rows, 4) if rows else None


__all__ = ["IGNORE", "SharedPrefixCollator", "StepTally", "pack_rows", "sequences"]
