"""TRL's AsyncGRPOTrainer with six additions: the trainer/sampler mismatch metric (with the importance-sampling
ratio's extremes), atomic checkpoints, the SFT anchor (`anchor.py`: the warm start's loss on teacher rows, added to
each micro-batch), a probe of the served logprobs after each merged sync (`weight_sync.ServedProbe`), the adapter's
distance from its start (`drift.py`), and (for tests) a record of every trained token id.

Mismatch is measured on on-policy tokens only: a sample trained at the policy version it was sampled with, every
turn of it. Each sample carries that version (`sample/policy_version`, NaN for a sample whose turns span a sync:
`rollout_worker/groups.py`), and the collator spreads it over the sample's packed tokens
(`trl_compat.trainer.GRPOTrainerBase.per_token_metrics`). Off-policy samples differ by the policy update, which is
drift, not mismatch; they are logged apart as `offpolicy/abs_ratio_minus_1`. Even at max_staleness 0 most are
off-policy after step 1: accelerate's dispatcher forms the next batch while the current one trains (measured: the
step-2 batch was read at version 1 and trained at version 2), and the token-budget batcher carries one sample over
each boundary.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from fathom.rollout_worker.groups import POLICY_VERSION
from fathom.trl_compat.trainer import GRPOTrainerBase

STAGING = ".staging"
VERSION_KEY = "policy_version"
"""The batch's per-token policy version (NaN: mixed, or not known), from each sample's POLICY_VERSION."""


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written whole; nothing of it is left where a resume would look."""


class FathomGRPOTrainer(GRPOTrainerBase):
    record_trained_path: str | None = None
    """When set, each micro-batch's trained token runs (completion_mask = 1) are appended here as JSON lines."""

    sft_anchor: Any = None
    """An `anchor.SftAnchor`, or None: its coef x NLL on one teacher row joins each micro-batch's loss."""

    served_probe: Any = None
    """A `weight_sync.ServedProbe`, or None: after each weight sync, how far the served logprobs moved."""

    drift_start: Any = None
    """A `drift.snapshot` of the adapter GRPO started from, or None: each logged step adds its `drift/*` distance."""

    per_token_metrics = {POLICY_VERSION: VERSION_KEY}

    _staging = False
    _probe_thread: threading.Thread | None = None
    _probe_result: Any = None

    def before_weight_sync(self) -> None:
        # The probe of the previous sync ran in a thread while this step trained: on 2 cores vLLM's API process
        # shares its core with the busy model worker during GRPO, and the two prefills took 5-19 s a step when the
        # trainer waited for them. So each line logs the probe of the sync before the step.
        if self._probe_thread is not None:
            self._probe_thread.join()  # done long ago; bounded by the probe's HTTP timeout
            self._probe_thread, result = None, self._probe_result
            if result is not None:
                self.log_metric("sync/served_logprob_shift", result.shift)
                self.log_metric("sync/served_logprob_noise", result.noise)
                self.log_metric("perf/served_probe_s", result.seconds)

    def after_weight_sync(self) -> None:
        if self.served_probe is not None and self.accelerator.is_main_process:
            def run() -> None:
                self._probe_result = self.served_probe.check()

            # the cold sync at train begin gives the first baseline (check() returns None for it)
            self._probe_result = None
            self._probe_thread = threading.Thread(target=run, name="served-probe", daemon=True)
            self._probe_thread.start()

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.drift_start is not None and self.model.training:
            from fathom.trainer.drift import distance

            logs.update(distance(self.model, self.drift_start))
        super().log(logs, start_time)

    def _on_policy_tokens(self, versions: torch.Tensor | None) -> torch.Tensor | None:
        """Per packed token: was its sample drawn from the policy the trainer holds now (NaN, a mixed or unknown
        version, never is). None when the batch carries no versions."""
        return None if versions is None else versions == float(self.model_version)

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
        if self.sft_anchor is not None:
            nll = self.sft_anchor.nll(model, device=inputs["input_ids"].device)
            # scaled like TRL's policy loss (HF's own accumulation scaling is off), so a step adds coef x mean NLL
            loss = loss + self.sft_anchor.coef * nll / self.current_gradient_accumulation_steps
            self.log_metric("sft_anchor/nll", nll.item())
        if self.record_trained_path:
            self._record_trained(inputs)
        return loss

    def _log_mismatch(self, log_probs: torch.Tensor, inputs: dict[str, Any]) -> None:
        """Mean |exp(trainer logprob - sampler logprob) - 1| over trained tokens, with the same shift and padding
        strip as TRL's loss; the sampler logprob is vLLM's, carried through the capture."""
        keep = inputs["attention_mask"].bool()
        old = inputs["old_log_probs"][keep][1:].cpu()
        trained = (inputs["completion_mask"][keep][1:] > 0).cpu()
        versions = inputs.get(VERSION_KEY)
        on = self._on_policy_tokens(None if versions is None else versions[keep].cpu())
        on = torch.zeros_like(trained) if on is None else on[1:]
        ratio = torch.exp(log_probs[0].float().cpu() - old.float())
        dev = (ratio - 1).abs()
        for name, sel in (("mismatch", trained & on), ("offpolicy", trained & ~on)):
            if sel.any():
                self.log_metric(f"{name}/abs_ratio_minus_1", dev[sel].mean().item())
                self.log_metric(f"{name}/abs_ratio_minus_1_max", dev[sel].max().item())
        if trained.any():
            # the extremes of the importance-sampling ratio TRL's `ratio` averages: how far the clip (1 +- 0.2) bites
            self.log_metric("is_ratio/min", ratio[trained].min().item())
            self.log_metric("is_ratio/max", ratio[trained].max().item())
        self.log_metric("mismatch/on_policy_token_frac", (float((trained & on).sum()), float(trained.sum().clamp(min=1))))

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
    def checkpoint_dir(self, run_dir: str) -> str:
        return os.path.join(run_dir, STAGING) if self._staging else run_dir

    def save_checkpoint(self, write: Callable[[], None], run_dir: str) -> None:
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staging = Path(run_dir) / STAGING
        shutil.rmtree(staging, ignore_errors=True)
        self._staging = True
        try:
            write()
        except OSError as e:
            # Disk full (or gone) mid-write: the half checkpoint is dropped, the previous one stays the newest
            # complete one, and the run stops loudly; `fathom train --resume` continues from there.
            shutil.rmtree(staging, ignore_errors=True)
            raise CheckpointWriteError(
                f"writing {name} into {run_dir} failed ({e}); it was discarded and the previous checkpoint is "
                "untouched. Free disk space, then `fathom train --resume`") from e
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
