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


def per_token_collator(base: type, per_token: dict[str, str]) -> type:
    """A subclass of TRL's rollout collator `base` that adds, per `metric key -> batch key` of `per_token`, a float
    tensor shaped like the packed `input_ids` (module docstring). A sample without the key gets NaN."""

    class PerTokenCollator(base):
        def torch_call(self, examples: list[Any]) -> dict[str, Any]:
            (rows,) = examples  # one micro-batch, already split into one list of samples per packed row
            values = {batch_key: [[ex["metrics"].pop(key, float("nan")) for ex in row] for row in rows]
                      for key, batch_key in per_token.items()}
            batch = super().torch_call(examples)
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
            return batch

    return PerTokenCollator


class GRPOTrainerBase(AsyncGRPOTrainer):
    """TRL's AsyncGRPOTrainer with the hooks of the module docstring (the defaults are TRL's behaviour)."""

    per_token_metrics: dict[str, str] = {}

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
        if not self.per_token_metrics:
            return super().get_train_dataloader()
        # TRL builds its collator inside get_train_dataloader by this module-level name; the swap lasts the call.
        original = agt.DataCollatorForRollout
        agt.DataCollatorForRollout = per_token_collator(original, self.per_token_metrics)
        try:
            return super().get_train_dataloader()
        finally:
            agt.DataCollatorForRollout = original


__all__ = ["GRPOTrainerBase", "has_nccl_weight_transfer", "patch_chunked_logprob", "patch_peak_flops",
           "per_token_collator", "replace_hub_attention", "skip_vllm_guard", "vllm_named_params"]
