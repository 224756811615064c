"""Settings of the async GRPO trainer (TRL 1.15 AsyncGRPOTrainer + PEFT LoRA) and its rollout worker."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from fathom.config.base import FathomModel
from fathom.config.cpus import checked_cpu_spec


class LoraConfig(FathomModel):
    rank: int = Field(16, gt=0)
    """LoRA rank r (production: 16 on all seven projections)."""

    alpha: int = Field(32, gt=0)
    """LoRA alpha; alpha / rank = 2 scales the update as in the SFT probe that learned the scaffold."""

    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """LoRA dropout; keep 0 so the trained policy matches what vLLM samples."""

    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    """Modules that get adapters (never lm_head or embed_tokens: TRL's fused head would ignore them)."""


class TrainerConfig(FathomModel):
    learning_rate: float = Field(1e-5, gt=0)
    """AdamW learning rate for the LoRA parameters. 1e-5, not TRL's full-finetune default 1e-6: a rank-16 adapter
    starts at zero (B = 0) and moves only ~1% of the weights, so it needs a ~10x larger step to change the policy
    within a few hundred updates; the SFT probe trained stably at 1e-3, so 1e-5 leaves a 100x margin for the
    noisier policy-gradient signal and keeps the clipped ratio (epsilon 0.2) rarely active."""

    num_generations: int = Field(8, ge=2)
    """GRPO group size: rollouts per task (every one gets the same task, picked by the group id)."""

    max_staleness: int = Field(2, ge=0)
    """Policy versions a rollout may lag the trainer and still be trained on; 0 makes training synchronous.
    Production sets 4 (merged sync); under adapter sync vLLM must hold max_staleness + 2 adapters."""

    max_steps: int = Field(10, gt=0)
    """Optimizer steps for the run."""

    temperature: float = Field(1.0, gt=0)
    """Sampling temperature of training rollouts; top_p 1, no top-k, min-p or penalties (no truncation sampling)."""

    max_completion_tokens: int = Field(512, gt=0)
    """Output cap per model call; evaluation reads this same field so the cap is the same in training and eval.
    Max turns come from env_server.max_turns, shared the same way."""

    token_budget: int = Field(2048, gt=0)
    """Real tokens packed into one forward row (TRL's token-budget batcher). TRL's default, vLLM's max_model_len,
    packed 75 samples into one row on CPU and took 159 s for 4,060 tokens; a small row keeps attention cheap."""

    share_prefix: bool = True
    """Forward the prompt a row's samples share once instead of once per sample (`trainer/prefix_tree.py`): same
    loss, fewer forwarded tokens (bench/shared_prefix.py). Takes effect only with the sdpa attention (always the case
    on CPU); FlashAttention reads packed rows as flat sequences, so with it rows are packed whole."""

    gradient_accumulation_steps: int = Field(1, ge=1)
    """Micro-batches (rows of up to token_budget tokens) per optimizer step."""

    gradient_checkpointing: bool = False
    """Recompute activations in backward: saves memory for the 1.5B model on GPU, costs ~30% time on CPU."""

    autocast_bf16: bool | Literal["auto"] = False
    """Run the trainer's matmuls under bf16 autocast (weights stay fp32). `auto` turns it on where bf16 matmuls are
    native (CUDA, or a CPU with AMX or AVX512-BF16; `sft.bf16` resolves the same way). fp32 keeps the
    trainer/sampler mismatch at 9.4e-6 against vLLM fp32, while bf16 autocast moved logprobs by 2.3e-2 (mean
    |ratio - 1|) for a 2.6-3.2x faster fwd+bwd (bench/trainer.py)."""

    drop_flat_groups: bool = False
    """Never train on a group whose rewards are all equal (every advantage 0): DAPO's dynamic sampling. Such a
    group adds no gradient but costs a full forward and backward and dilutes the loss's token normaliser;
    `rollout/flat_group_frac` in metrics.jsonl counts them. Off reproduces TRL's default; the smoke config turns it
    on, so the trainer's one core goes to groups that carry a gradient. A family whose groups are never right then
    contributes nothing while the program opening all families share moves, and its held-out tasks can fall."""

    balance_lengths: bool = False
    """Give every episode of a group the same total weight in the loss: its advantage is scaled by the group's mean
    trained tokens over its own (`rollout_worker/groups.py`). TRL's loss is a mean over all trained tokens, so a
    wrong episode that runs three turns pushes the shared program template down three times harder than a right
    one-turn episode pushes it up. Off reproduces TRL."""

    cpu_cores: str = ""
    """Cores the trainer process may run on, like `1` or `2-7` (empty: all, torch's default threads). Its torch
    threads are set to their count. On a CPU machine give it the cores vLLM's worker does not use
    (`policy_server.cpu_cores`): measured on 2 cores with vLLM's worker bound to core 0, LoRA fwd+bwd of the embedded
    model ran at 4.8 tok/s on 2 threads over both cores and 70.7 tok/s on 1 thread pinned to core 1, because each
    parallel region waited for its thread on vLLM's core."""

    max_inflight_rollouts: int = Field(-1, ge=-1)
    """Episodes running at once; -1 lets TRL pick max(max_staleness, 1) x samples per step."""

    episode_timeout_s: float = Field(900.0, gt=0)
    """How long the rollout worker waits for one episode before closing it as unscorable."""

    train_split_size: int = Field(1200, gt=0)
    """Tasks in the training dataset, planned from the train seed block (families round-robin; past the first 1000,
    the families added later, taken in rounds with the first: `tasks.splits.rounds`), mixed by weight with the
    imported tasks.sources whose roles include train (tasks.generated_weight; docs/tasks.md)."""

    train_max_length: int = Field(2**17, gt=0)
    """Longest context (characters) of a training task; shorter tasks of the train plan and of imported sources are
    kept."""

    train_families: list[str] = []
    """Task families GRPO trains on (empty: all). A family the policy never solves gives groups whose rewards
    barely differ, so a short run spends its few steps where the warm start is right some of the time."""

    save_steps: int = Field(5, gt=0)
    """Write a checkpoint (adapter + optimizer + step) every this many optimizer steps; a crash loses at most this."""

    save_total_limit: int = Field(3, gt=0)
    """Checkpoints kept in the run directory (oldest removed)."""

    hub_repo: str = ""
    """Hub repo id the adapter checkpoints are pushed to in on_save; empty disables pushing."""

    report_to: list[Literal["trackio", "wandb"]] = []
    """Trackers besides metrics.jsonl in the run directory."""

    watchdog_s: float = Field(1800.0, gt=0)
    """No optimizer step for this long fails the run loudly (message, non-zero exit)."""

    weight_sync_timeout_s: float = Field(600.0, gt=0)
    """HTTP timeout of one weight sync (reload or adapter load) on the policy server."""

    seed: int = 0
    """Seed of the trainer's random state (a fresh adapter's initialisation). It does not order the training tasks:
    TRL's rollout worker takes them as listed; `task_order_seed` shuffles them."""

    task_order_seed: int | None = None
    """Shuffle the training tasks with this seed, each family's among themselves, families still round-robin. None:
    the train plan's order, so every run trains on the same tasks in the same order, and a short run's first and
    second halves differ by which tasks they drew as much as by training (docs/main_job.md, "Why training-time
    success can fall")."""

    init_adapter: str = ""
    """LoRA adapter (directory or Hub repo id) GRPO continues from, e.g. the SFT warm start; empty starts from a
    fresh adapter. Its rank, alpha and target modules must match `lora`. `fathom launch` sets it to the SFT stage's
    adapter, and skips SFT when it is already set."""

    sft_anchor_coef: float = Field(0.0, ge=0.0)
    """Weight of the SFT anchor: the mean next-token loss on one row of the warm start's teacher data, added to
    each GRPO micro-batch (InstructGPT's PPO-ptx; `trainer/anchor.py`), meant to hold the families GRPO does not
    train on where SFT left them; `sft_anchor/nll` in metrics.jsonl is the loss. 0 (off) reproduces TRL and costs
    nothing; on, each micro-batch runs one more forward and backward of about one SFT row (~800 tokens). On every
    family's rows it also re-teaches which program goes with which question, and at 1.0 it moved held-out kv_chain
    onto the one-hop needle program (docs/trainer.md, "The SFT anchor")."""

    sft_anchor_data: str = ""
    """The anchor's rows: a data.jsonl written by `fathom sft` (`<run>/sft/data.jsonl`). `fathom launch` sets it
    when its plan runs the SFT stage; with a starting adapter of your own, name that adapter's data.jsonl."""

    sft_anchor_families: list[str] = []
    """The task families whose teacher rows the anchor trains on (empty: all), e.g. only those outside
    `train_families`. With code_qa's rows alone, held-out code_qa rose but the code_qa program spread to needle and
    kv_chain questions (docs/trainer.md, "The SFT anchor")."""

    cuda_device: int = 0
    """CUDA device the trainer runs on (its CUDA_VISIBLE_DEVICES), beside `policy_server.cuda_device`."""

    attention: Literal["auto", "flash_attn3", "sdpa"] = "auto"
    """Attention of the trainer's model on CUDA. `flash_attn3`: TRL's FlashAttention-3 kernel from the Hub
    (`kernels-community/flash-attn3`), fetched at run time; the run stops if it cannot load. `sdpa`: torch SDPA run
    on each packed sequence alone (what the CPU trainer uses), nothing fetched. `auto`: flash_attn3 where it loads,
    else sdpa with a warning. On CPU it is always sdpa."""

    lora: LoraConfig = LoraConfig()
    """Adapter shape."""

    @field_validator("cpu_cores", mode="before")
    @classmethod
    def _cpu_cores(cls, v: object) -> object:
        return checked_cpu_spec(v, ("",))  # empty: not pinned
