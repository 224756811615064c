"""TRL's AsyncGRPOTrainer with six additions: the trainer/sampler mismatch metric (with the importance-sampling
ratio's extremes), atomic checkpoints, the SFT anchor (`anchor.py`: the warm start's loss on teacher rows, added to
each micro-batch), a probe of the served logprobs after each merged sync (`weight_sync.ServedProbe`), the adapter's
distance from its start (`drift.py`), and (for tests) a record of every trained token id.

Mismatch is measured on on-policy tokens only: a sample trained at the policy version it was sampled
with, every turn of it (the rollout loop stamps the oldest version of its turns and flags a sample whose turns
span a sync, `rollout_worker/groups.py`). Off-policy samples differ by the policy update, which is drift, not
mismatch; they are logged apart as `offpolicy/abs_ratio_minus_1`. Even at max_staleness 0 most are off-policy
after step 1: accelerate's dispatcher forms the next batch while the current one trains (measured: the step-2
batch was read at version 1 and trained at version 2), and the token-budget batcher carries one sample over each
boundary.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl.experimental.async_grpo import AsyncGRPOTrainer

from fathom.rollout_worker.groups import MIXED

STAGING = ".staging"
log = logging.getLogger(__name__)


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written whole; nothing of it is left where a resume would look."""


class _VersionTap:
    """Stands in for the rollout queue: records each sample's policy version by its token ids as it is read, with
    how many read samples share those ids. The version is None for a sample whose turns came from more than one
    version (a weight sync landed inside its episode), and for ids shared by samples of different versions: the
    packed batch cannot tell them apart (a group of short episodes often holds identical ones)."""

    def __init__(self, queue: Any, versions: dict[int, list]):
        self.queue, self.versions = queue, versions

    def get(self, *args: Any, **kwargs: Any) -> Any:
        sample = self.queue.get(*args, **kwargs)
        version = None if sample.metrics.get(MIXED, 0.0) else sample.model_version
        entry = self.versions.setdefault(hash(tuple(sample.input_ids)), [version, 0])
        if entry[0] != version:
            if entry[0] is not None and version is not None:
                log.info("samples with the same %d token ids came from policy versions %d and %d: "
                         "neither counts on-policy", len(sample.input_ids), entry[0], version)
            entry[0] = None
        entry[1] += 1
        return sample

    def qsize(self) -> int:
        return self.queue.qsize()


class FathomGRPOTrainer(AsyncGRPOTrainer):
    record_trained_path: str | None = None
    """When set, each micro-batch's trained token runs (completion_mask = 1) are appended here as JSON lines."""

    sft_anchor: Any = None
    """An `anchor.SftAnchor`, or None: its coef x NLL on one teacher row joins each micro-batch's loss."""

    served_probe: Any = None
    """A `weight_sync.ServedProbe`, or None: after each weight sync, how far the served logprobs moved."""

    drift_start: Any = None
    """A `drift.snapshot` of the adapter GRPO started from, or None: each logged step adds its `drift/*` distance."""

    _staging = False
    _probe_thread: threading.Thread | None = None
    _probe_result: Any = None

    def _sync_weight(self):
        # The probe of the previous sync ran in a thread while this step trained: on 2 cores vLLM's API process
        # shares its core with the busy model worker during GRPO, and the two prefills took 5-19 s a step when the
        # trainer waited for them. So each line logs the probe of the sync before the step.
        if self._probe_thread is not None:
            self._probe_thread.join()  # done long ago; bounded by the probe's HTTP timeout
            self._probe_thread, result = None, self._probe_result
            if result is not None:
                self._metrics["train"]["sync/served_logprob_shift"].append(result.shift)
                self._metrics["train"]["sync/served_logprob_noise"].append(result.noise)
                self._metrics["train"]["perf/served_probe_s"].append(result.seconds)
        super()._sync_weight()
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

    def get_train_dataloader(self):
        loader = super().get_train_dataloader()
        self._sample_versions: dict[int, list] = {}
        if self._rollout_dataset is not None:
            self._rollout_dataset.queue = _VersionTap(self._rollout_dataset.queue, self._sample_versions)
        return loader

    def _on_policy_tokens(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Per packed token: was its sample drawn from the policy the trainer holds now."""
        starts = (pos == 0).nonzero().flatten().tolist() + [len(ids)]
        on = torch.zeros(len(ids), dtype=torch.bool)
        versions = getattr(self, "_sample_versions", {})
        for a, b in zip(starts[:-1], starts[1:]):
            key = hash(tuple(ids[a:b].tolist()))
            entry = versions.get(key)
            if entry is None:
                continue
            on[a:b] = entry[0] == self.model_version  # None (mixed or shared) never is
            entry[1] -= 1
            if entry[1] <= 0:
                del versions[key]
        return on

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
            self._metrics["train"]["sft_anchor/nll"].append(nll.item())
        if self.record_trained_path:
            self._record_trained(inputs)
        return loss

    def _log_mismatch(self, log_probs: torch.Tensor, inputs: dict[str, Any]) -> None:
        """Mean |exp(trainer logprob - sampler logprob) - 1| over trained tokens, with the same shift and padding
        strip as TRL's loss; the sampler logprob is vLLM's, carried through the capture."""
        keep = inputs["attention_mask"].bool()
        old = inputs["old_log_probs"][keep][1:].cpu()
        trained = (inputs["completion_mask"][keep][1:] > 0).cpu()
        on = self._on_policy_tokens(inputs["input_ids"][keep].cpu(), inputs["position_ids"][keep].cpu())[1:]
        ratio = torch.exp(log_probs[0].float().cpu() - old.float())
        dev = (ratio - 1).abs()
        for name, sel in (("mismatch", trained & on), ("offpolicy", trained & ~on)):
            if sel.any():
                self._metrics["train"][f"{name}/abs_ratio_minus_1"].append(dev[sel].mean().item())
                self._metrics["train"][f"{name}/abs_ratio_minus_1_max"].append(dev[sel].max().item())
        if trained.any():
            # the extremes of the importance-sampling ratio TRL's `ratio` averages: how far the clip (1 +- 0.2) bites
            self._metrics["train"]["is_ratio/min"].append(ratio[trained].min().item())
            self._metrics["train"]["is_ratio/max"].append(ratio[trained].max().item())
        self._metrics["train"]["mismatch/on_policy_token_frac"].append((float((trained & on).sum()),
                                                                        float(trained.sum().clamp(min=1))))

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
