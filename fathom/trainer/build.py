"""Wire one training run: TRL's AsyncGRPOTrainer + PEFT LoRA, our rollout worker, weight sync, callbacks.

Heavy imports happen inside `build_trainer`, so entry points can parse their config first.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fathom.config import FathomConfig, merged_backend

log = logging.getLogger(__name__)


class TrainerDeviceError(RuntimeError):
    """The config asks for CUDA and the trainer's torch cannot see a GPU; the CPU patches would run it on CPU."""


def no_cuda_reason(torch: Any) -> str:
    """Why a `policy_server.device = "cuda"` run refuses to train on this interpreter's torch."""
    import os
    import sys

    build = torch.version.cuda
    why = (f"torch {torch.__version__} is a CPU build" if not build else
           f"torch {torch.__version__} (CUDA {build}) finds no usable GPU "
           f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}; driver too old or absent?)")
    return (f"policy_server.device is 'cuda' but the trainer cannot use CUDA: {why}, in {sys.executable}. Training on "
            "the CPU patches instead would take days: run `make setup-gpu` (installs the CUDA torch), check "
            "`fathom doctor --gpu`, or set policy_server.device = 'cpu' for a CPU run.")


@dataclass
class Endpoints:
    vllm_url: str
    """Policy server root (no /v1): weight sync and pause/resume."""
    proxy_url: str
    """Capture proxy root: sessions, traces, POST /policy/version."""
    env_url: str | list[str]
    """Env server root (POST /episodes), or several: the rollout worker spreads episodes by load."""


@dataclass
class Run:
    trainer: Any
    transfer: Any
    watchdog: Any
    metrics: Any
    run_dir: Path
    rollouts_path: Path
    extras: dict[str, Any] = field(default_factory=dict)


def eos_ids(model_path: str, tokenizer: Any) -> list[int]:
    from transformers import GenerationConfig

    ids: list[int] = []
    try:
        gen = GenerationConfig.from_pretrained(model_path).eos_token_id
        ids = [gen] if isinstance(gen, int) else list(gen or [])
    except OSError:
        pass
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.insert(0, tokenizer.eos_token_id)
    return ids


def grpo_args(cfg: FathomConfig, run_dir: Path, vllm_url: str, *, cuda: bool) -> Any:
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from fathom.trainer import cpu_compat

    t = cfg.trainer
    return AsyncGRPOConfig(
        output_dir=str(run_dir),
        learning_rate=t.learning_rate,
        num_generations=t.num_generations,
        max_staleness=t.max_staleness,
        max_steps=t.max_steps,
        temperature=t.temperature,
        top_p=1.0,
        top_k=0,
        max_completion_length=t.max_completion_tokens,
        max_tool_calling_iterations=cfg.env_server.max_turns,
        token_budget=t.token_budget,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        per_device_train_batch_size=t.num_generations,
        gradient_checkpointing=t.gradient_checkpointing,
        bf16=cpu_compat.use_bf16(t.autocast_bf16, "trainer.autocast_bf16"),
        dtype=cfg.model.dtype,
        max_inflight_tasks=t.max_inflight_rollouts if t.max_inflight_rollouts > 0
        else t.num_generations * max(1, t.max_staleness),
        save_strategy="steps",
        save_steps=t.save_steps,
        save_total_limit=t.save_total_limit,
        logging_steps=1,
        report_to=list(t.report_to) or "none",
        disable_tqdm=True,
        seed=t.seed,
        vllm_server_base_url=vllm_url,
        weight_sync_timeout=int(t.weight_sync_timeout_s),
        heartbeat_stale_after_s=t.watchdog_s,
        use_cpu=not cuda,
    )


def build_trainer(cfg: FathomConfig, *, model_path: str, endpoints: Endpoints, task_ids: list[str],
                  run_dir: str | Path | None = None, progress: bool = True,
                  rollout_cores: list[int] | None = None) -> Run:
    """The trainer and its parts for `cfg`; `trainer.train()` (or `run.trainer.train(resume_from_checkpoint=...)`)
    runs it. Refuses an installed TRL other than 1.15.0, and a CUDA config where torch sees no GPU; on a machine
    without CUDA applies the CPU patches, on CUDA the attention `trainer.attention` picks.
    `rollout_cores`: the cores TRL's rollout child moves to (None: it shares the trainer's).

    Long because it wires the parts in the order they depend on each other (checks, model, worker, weight sync,
    callbacks, trainer); each part is built by its own module, and this function only connects them."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer

    from fathom.rollout_worker import build_worker
    from fathom.rollout_worker.dataset import prompt_rows
    from fathom.trainer import cpu_compat
    from fathom.trainer.bucket import bucket_run_dir
    from fathom.trainer.callbacks import BucketCopy, HubPush, MetricsJsonl, RichProgress, Watchdog
    from fathom.trainer.grpo import FathomGRPOTrainer
    from fathom.trainer.weight_sync import DiskMergedSync, NcclMergedSync, ServedProbe

    cpu_compat.check_trl_version()
    cuda = torch.cuda.is_available()
    t, ps = cfg.trainer, cfg.policy_server
    if ps.device == "cuda" and not cuda:
        raise TrainerDeviceError(no_cuda_reason(torch))
    attn = cpu_compat.SEGMENT_SDPA
    if not cpu_compat.apply():
        from fathom.trainer import attention

        attn = attention.choose(t.attention, cuda=cuda)
        attention.install(attn)
    run_dir = Path(run_dir or cfg.run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    rollouts_path = run_dir / "rollouts.jsonl"

    anchor = None
    if t.sft_anchor_coef > 0:  # read before the model loads, so a bad path fails at once
        from fathom.trainer.anchor import SftAnchor, load_rows, missing_rows, rows_path

        path = rows_path(t.sft_anchor_data, t.init_adapter)
        if not path:
            raise missing_rows(t.sft_anchor_coef, t.init_adapter)
        anchor = SftAnchor(load_rows(path, t.sft_anchor_families), t.sft_anchor_coef, seed=t.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    dataset = Dataset.from_dict(prompt_rows(task_ids))
    args = grpo_args(cfg, run_dir, endpoints.vllm_url, cuda=cuda)
    worker = build_worker(
        model_name=ps.served_model_name, dataset=dataset, tokenizer=tokenizer, eos_token_ids=eos_ids(model_path, tokenizer),
        proxy_url=endpoints.proxy_url, env_url=endpoints.env_url, vllm_url=endpoints.vllm_url,
        num_generations=t.num_generations, max_inflight=args.max_inflight_tasks, max_tokens=t.max_completion_tokens,
        max_turns=cfg.env_server.max_turns, temperature=t.temperature, episode_timeout_s=t.episode_timeout_s,
        rollouts_path=rollouts_path, metadata={"run": cfg.run_name}, drop_flat_groups=t.drop_flat_groups,
        balance_lengths=t.balance_lengths, cpu_cores=rollout_cores)

    transfer: Any = None
    if ps.weight_sync == "merged":
        # retry_s: a policy server or proxy that `fathom launch` restarts mid-sync is waited for, not fatal.
        common = {"vllm_url": endpoints.vllm_url, "proxy_url": endpoints.proxy_url, "timeout_s": t.weight_sync_timeout_s,
                  "state_path": policy_state_path(run_dir), "retry_s": t.weight_sync_timeout_s}
        if merged_backend(cfg) == "nccl":
            transfer = NcclMergedSync(**common)
        else:
            transfer = DiskMergedSync(directory=merged_directory(ps.merged_dir, run_dir, cfg.run_name), **common)
    # adapter sync: transfer stays None and TRL publishes `trl-policy-vN` adapters through /v1/load_lora_adapter,
    # which the proxy pins sessions to (capture_proxy.adapter_prefix).

    watchdog = Watchdog(t.watchdog_s)
    metrics = MetricsJsonl(run_dir, rollouts_path)
    callbacks = [metrics, watchdog, RichProgress(t.max_steps, enabled=progress)]
    if t.hub_repo:
        callbacks.append(HubPush(t.hub_repo, run_dir))
    if (bucket := bucket_run_dir(cfg.launch.bucket_dir, cfg.run_name)) is not None:
        callbacks.append(BucketCopy(bucket, run_dir))
    lora = LoraConfig(r=t.lora.rank, lora_alpha=t.lora.alpha, lora_dropout=t.lora.dropout,
                      target_modules=list(t.lora.target_modules), task_type="CAUSAL_LM")
    trainer = FathomGRPOTrainer(model=model_path, args=args, train_dataset=dataset, processing_class=tokenizer,
                                callbacks=callbacks, peft_config=lora, rollout_worker=worker, weight_transfer=transfer)
    # disable_tqdm makes transformers print every log dict instead; metrics.jsonl and the rich bar cover it
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    if transfer is not None:  # adapter sync serves each version under a new name; the probe reads merged syncs
        trainer.served_probe = ServedProbe(vllm_url=endpoints.vllm_url, model=ps.served_model_name)
    trainer.sft_anchor = anchor
    if t.share_prefix and attn == cpu_compat.SEGMENT_SDPA:  # the one attention that reads a shared-prefix row
        from fathom.trainer.prefix_tree import share_row

        trainer.share_row = share_row
    if t.init_adapter:
        from fathom.trainer.adapters import load_init_adapter

        # Before train(): TRL's cold weight sync at train begin then serves base + this adapter to the first rollouts.
        load_init_adapter(trainer.model, t.init_adapter, t.lora)
    from fathom.trainer.drift import snapshot

    trainer.drift_start = snapshot(trainer.model)  # where `drift/*` measures from: the warm start, or a fresh adapter
    if transfer is not None:
        transfer.bind(trainer)
    return Run(trainer=trainer, transfer=transfer, watchdog=watchdog, metrics=metrics, run_dir=run_dir,
               rollouts_path=rollouts_path)


def merged_directory(setting: str, run_dir: Path, run_name: str):
    """`policy_server.merged_dir` as `DiskMergedSync` takes it: a function of the merged state dict's size, which
    picks the folder at the first sync (`merged_dir.choose`) and logs where the weights go, and why if "auto"
    fell back to the run directory."""
    from fathom.trainer.merged_dir import choose

    def pick(need_bytes: int) -> Path:
        chosen = choose(setting, run_dir, run_name, need_bytes)
        if chosen.note:
            log.warning(chosen.note)
        log.info("merged weights (%.0f MiB) go to %s", need_bytes / 2**20, chosen.path)
        return chosen.path

    return pick


def policy_state_path(run_dir: str | Path) -> Path:
    """Where merged sync records the newest weights and version, for the supervisor to re-apply after a restart."""
    return Path(run_dir) / "policy_state.json"


def latest_checkpoint(run_dir: str | Path) -> str | None:
    """The newest complete checkpoint of a run (staging directories are never listed)."""
    from transformers.trainer_utils import get_last_checkpoint

    d = Path(run_dir)
    return get_last_checkpoint(str(d)) if d.is_dir() else None
