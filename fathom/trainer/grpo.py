"""TRL's AsyncGRPOTrainer with three additions: the trainer/sampler mismatch metric, atomic checkpoints, and
(for tests) a record of every trained token id."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl.experimental.async_grpo import AsyncGRPOTrainer

STAGING = ".staging"


class FathomGRPOTrainer(AsyncGRPOTrainer):
    record_trained_path: str | None = None
    """When set, each micro-batch's trained token runs (completion_mask = 1) are appended here as JSON lines."""

    _staging = False

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        seen: list[torch.Tensor] = []

        def grab(_module, _args, output):
            if getattr(output, "log_probs", None) is not None:
                seen.append(output.log_probs.detach())

        handle = self.accelerator.unwrap_model(model).register_forward_hook(grab)
        try:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        finally:
            handle.remove()
        if seen:
            self._log_mismatch(seen[-1], inputs)
        if self.record_trained_path:
            self._record_trained(inputs)
        return loss

    def _log_mismatch(self, log_probs: torch.Tensor, inputs: dict[str, Any]) -> None:
        """Mean |exp(trainer logprob - sampler logprob) - 1| over trained tokens, with the same shift and padding
        strip as TRL's loss; the sampler logprob is vLLM's, carried through the capture."""
        keep = inputs["attention_mask"].bool()
        old = inputs["old_log_probs"][keep].unsqueeze(0)[:, 1:]
        mask = inputs["completion_mask"][keep].unsqueeze(0)[:, 1:] > 0
        if mask.any():
            ratio = torch.exp(log_probs.float() - old.float())[mask]
            self._metrics["train"]["mismatch/abs_ratio_minus_1"].append((ratio - 1).abs().mean().item())
            self._metrics["train"]["mismatch/abs_ratio_minus_1_max"].append((ratio - 1).abs().max().item())

    def _record_trained(self, inputs: dict[str, Any]) -> None:
        ids, mask = inputs["input_ids"], inputs["completion_mask"]
        runs: list[list[int]] = []
        for row_ids, row_mask in zip(ids.tolist(), mask.tolist()):
            cur: list[int] = []
            for t, m in zip(row_ids, row_mask):
                if m:
                    cur.append(t)
                elif cur:
                    runs.append(cur)
                    cur = []
            if cur:
                runs.append(cur)
        with open(self.record_trained_path, "a") as fh:
            fh.write(json.dumps({"step": self.state.global_step, "runs": runs}) + "\n")

    # --- checkpoints written whole, then renamed -------------------------------------------------------
    def _get_output_dir(self, trial):
        out = super()._get_output_dir(trial)
        return os.path.join(out, STAGING) if self._staging else out

    def _save_checkpoint(self, model, trial):
        run_dir = super()._get_output_dir(trial)
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staging = Path(run_dir) / STAGING
        shutil.rmtree(staging, ignore_errors=True)
        self._staging = True
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._staging = False
        final = Path(run_dir) / name
        if final.exists():
            shutil.rmtree(final)
        os.rename(staging / name, final)  # atomic: get_last_checkpoint never sees a half-written checkpoint
        shutil.rmtree(staging, ignore_errors=True)
        self._rotate(Path(run_dir))

    def _rotate(self, run_dir: Path) -> None:
        limit = self.args.save_total_limit
        if not limit:
            return
        ckpts = sorted((p for p in run_dir.glob(f"{PREFIX_CHECKPOINT_DIR}-*") if p.is_dir()),
                       key=lambda p: int(p.name.rsplit("-", 1)[1]))
        for p in ckpts[:-limit]:
            shutil.rmtree(p, ignore_errors=True)
