"""TRL's trainer-side internals: vLLM's parameter names, the NCCL engine check, the trainer's private members, the
rollout collator, and the module globals FATHOM replaces (see the package docstring for the list).

`GRPOTrainerBase` is TRL's `AsyncGRPOTrainer` with its private members turned into hooks:
- `before_weight_sync()` / `after_weight_sync()` run around TRL's `_sync_weight`;
- `log_metric(name, value)` appends to TRL's next log line (its `_metrics["train"]` window);
- `checkpoint_dir(run_dir)` says where the next checkpoint is written, and `save_checkpoint(write, run_dir)` wraps
  the write (`write()` runs TRL's own); they stand for transformers' `_get_output_dir` and `_save_checkpoint`, which
  AsyncGRPOTrainer inherits;
- `per_token_metrics` maps a per-sample metric key to a batch key: the collator takes the value out of each sample's
  metrics (so it is not logged) and adds a float tensor shaped like `input_ids`, each sample's tokens holding its
  value, padding NaN. That is how a per-sample fact reaches `compute_loss`, where the packed batch no longer says
  which token came from which sample.
- `share_row` packs each row with a shared prefix (a group's prompt forwarded once): the collator drops what the
  row already holds from every per-token tensor (`rollout_collator`, `drop_shared`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from trl.experimental.async_grpo import AsyncGRPOTrainer
from trl.experimental.async_grpo import async_grpo_trainer as agt
from trl.experimental.async_grpo.async_grpo_trainer import _iter_vllm_named_params

HUB_ATTENTION_PREFIX = "kernels-community/"
"""TRL loads its model with a Hub kernel (`kernels-community/flash-attn3`); `replace_hub_attention` swaps it."""


def vllm_named_params(model: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Parameter]]:
    """(name, parameter) for every weight vLLM loads, under the base checkpoint's names (a PEFT model's LoRA
    wrappers unwrapped), as TRL's merged weight sync sends them."""
    yield from _iter_vllm_named_params(model)


def has_nccl_weight_transfer(weight_transfer: Any) -> bool:
    """Whether TRL's `weight_transfer` module (passed in: importing it needs vLLM) saw a vLLM with the stateful
    NCCL trainer engine (vLLM >= 0.28)."""
    return bool(weight_transfer._HAS_STATEFUL_TRAINER_ENGINE)


def patch_peak_flops(fn: Callable[[Any, str], float | None]) -> None:
    """Make TRL's MFU use `fn(accelerator, dtype)` as the device's peak FLOP/s (TRL's own asks `torch.cuda`)."""
    agt.get_peak_flops_per_device = fn


def patch_chunked_logprob(impl: Any) -> None:
    """Make TRL's fused LM head call `impl.apply(...)` in place of its Triton-only chunked log-prob kernel."""
    import trl.trainer.utils as trl_utils

    trl_utils._ChunkedLogProbFunction = impl


def skip_vllm_guard() -> None:
    """Let TRL's rollout worker start without the `vllm` package: only its default turn loop uses it, and a
    loop-owning worker talks to the capture proxy instead."""
    from trl.experimental.async_grpo import async_rollout_worker as arw

    arw.is_vllm_available = lambda *a, **k: True


def replace_hub_attention(attn_implementation: str) -> None:
    """Make TRL load its model with `attn_implementation` wherever it asks for a Hub kernel; installing twice
    wraps TRL's loader once."""
    original = getattr(agt.create_model_from_path, "_fathom_original", agt.create_model_from_path)

    def create_model_from_path(model_id, architecture=None, **kwargs):
        if str(kwargs.get("attn_implementation", "")).startswith(HUB_ATTENTION_PREFIX):
            kwargs["attn_implementation"] = attn_implementation
        return original(model_id, architecture, **kwargs)

    create_model_from_path._fathom_original = original  # type: ignore[attr-defined]
    agt.create_model_from_path = create_model_from_path


TOKEN_KEYS = ("input_ids", "attention_mask", "completion_mask", "old_log_probs", "position_ids", "advantages")
"""The per-token tensors of TRL's collated batch; `global_n_tokens`, `global_n_forward_tokens` and `mean_seq_len` are
per rank."""

ShareRow = Callable[[list[Any]], tuple[list[Any], list[int]]]
"""A row's samples -> (the samples in the order to pack them, how many leading tokens each drops)."""


def rollout_collator(base: type, per_token: dict[str, str], share: ShareRow | None = None) -> type:
    """A subclass of TRL's rollout collator `base` that
    - adds, per `metric key -> batch key` of `per_token`, a float tensor shaped like the packed `input_ids` (module
      docstring); a sample without the key gets NaN;
    - with `share`, packs each row's samples in `share`'s order and leaves out the leading tokens `share` says each
      drops from every per-token tensor (a prefix the row already holds: see `fathom.trainer.prefix_tree`), with the
      forwarded-token count TRL's throughput and MFU read cut to match, and `batch/shared_prefix_frac` logged (the
      share of sample tokens not forwarded)."""

    class RolloutCollator(base):
        def torch_call(self, examples: list[Any]) -> dict[str, Any]:
            (rows,) = examples  # one micro-batch, already split into one list of samples per packed row
            drops = None
            if share is not None:
                shared = [share(row) for row in rows]
                rows, drops = [r for r, _ in shared], [d for _, d in shared]
            values = {batch_key: [[ex["metrics"].pop(key, float("nan")) for ex in row] for row in rows]
                      for key, batch_key in per_token.items()}
            batch = super().torch_call([rows])
            width = batch["input_ids"].shape[1]
            for batch_key, per_row in values.items():
                out = torch.full((len(rows), width), float("nan"))
                for i, (row, vals) in enumerate(zip(rows, per_row)):
                    at = 0
                    for ex, v in zip(row, vals):
                        n = len(ex["input_ids"])
                        out[i, at:at + n] = float(v)
                        at += n
                batch[batch_key] = out
            if drops is not None:
                raw = sum(len(ex["input_ids"]) for row in rows for ex in row)
                forwarded = drop_shared(batch, rows, drops, {"input_ids": self.pad_token_id,
                                                             **dict.fromkeys(per_token.values(), float("nan"))})
                self.metrics["batch/shared_prefix_frac"].append((float(raw - forwarded), float(raw)))
            return batch

    return RolloutCollator


def drop_shared(batch: dict[str, Any], rows: list[list[Any]], drops: list[list[int]], pads: dict[str, float]) -> int:
    """Leave each sample's first `drops` tokens out of the batch's per-token tensors (TOKEN_KEYS and those in `pads`),
    re-padded with `pads` (0 for the rest), and set the per-rank forwarded-token figures to what is left; returns
    the number of tokens left."""
    keeps = [torch.tensor([i >= d for ex, d in zip(row, ds) for i in range(len(ex["input_ids"]))], dtype=torch.bool)
             for row, ds in zip(rows, drops)]
    width = max(int(k.sum()) for k in keeps)
    for key in dict.fromkeys([*TOKEN_KEYS, *pads]):
        old = batch[key]
        new = torch.full((len(rows), width), pads.get(key, 0), dtype=old.dtype)
        for i, keep in enumerate(keeps):
            kept = old[i, :len(keep)][keep]
            new[i, :len(kept)] = kept
        batch[key] = new
    forwarded = sum(int(k.sum()) for k in keeps)
    samples = sum(len(row) for row in rows)
    # TRL counts samples as forwarded tokens / mean_seq_len, so both shrink together
    batch["global_n_forward_tokens"] = torch.full_like(batch["global_n_forward_tokens"], float(forwarded))
    batch["mean_seq_len"] = torch.full_like(batch["mean_seq_len"], forwarded / samples)
    return forwarded


class GRPOTrainerBase(AsyncGRPOTrainer):
    """TRL's AsyncGRPOTrainer with the hooks of the module docstring (the defaults are TRL's behaviour)."""

    per_token_metrics: dict[str, str] = {}

    share_row: ShareRow | None = None
    """When set, rows are packed with a shared prefix (`rollout_collator`); the model's attention must read the tree
    from the position ids (`fathom.trainer.cpu_compat.segment_sdpa` does, FlashAttention does not)."""

    def before_weight_sync(self) -> None:
        pass

    def after_weight_sync(self) -> None:
        pass

    def log_metric(self, name: str, value: float | tuple[float, float]) -> None:
        self._metrics["train"][name].append(value)

    def checkpoint_dir(self, run_dir: str) -> str:
        return run_dir

    def save_checkpoint(self, write: Callable[[], None], run_dir: str) -> None:
        write()

    def _get_output_dir(self, trial):
        return self.checkpoint_dir(super()._get_output_dir(trial))

    def _save_checkpoint(self, model, trial):
        run_dir = super()._get_output_dir(trial)  # the run's own directory, whatever checkpoint_dir says
        self.save_checkpoint(lambda: super(GRPOTrainerBase, self)._save_checkpoint(model, trial), run_dir)

    def _sync_weight(self):
        self.before_weight_sync()
        super()._sync_weight()
        self.after_weight_sync()

    def get_train_dataloader(self):
        if not self.per_token_metrics and self.share_row is None:
            return super().get_train_dataloader()
        # TRL builds its collator inside get_train_dataloader by this module-level name; the swap lasts the call.
        original = agt.DataCollatorForRollout
        agt.DataCollatorForRollout = rollout_collator(original, self.per_token_metrics, self.share_row)
        try:
            return super().get_train_dataloader()
        finally:
            agt.DataCollatorForRollout = original


__all__ = ["TOKEN_KEYS", "GRPOTrainerBase", "ShareRow", "drop_shared", "has_nccl_weight_transfer",
           "patch_chunked_logprob", "patch_peak_flops", "rollout_collator", "replace_hub_attention", "skip_vllm_guard", "vllm_named_params"]
