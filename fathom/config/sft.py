"""Settings of the SFT warm start (`fathom sft`): scripted-teacher episodes recorded on the token path, then LoRA SFT."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from fathom.config.base import FathomModel


class SftConfig(FathomModel):
    n_tasks: int = Field(96, ge=1)
    """Training tasks whose scripted-teacher episodes are recorded as SFT examples (one episode each)."""

    families: list[str] = ["needle", "kv_chain", "code_qa"]
    """Task families drawn for SFT data, round-robin."""

    lengths: list[int] = [2048, 8192, 32768, 131072]
    """Context lengths (characters) drawn for SFT data, round-robin; past the model's window on purpose."""

    question_phrasings: dict[str, list[int]] = {}
    """Per family, the train split's question phrasings the SFT data may use (indices into the family's train
    templates, `fathom.tasks.generate.question_phrasings`); a task worded otherwise is replaced by the same slot's
    next seed, `n_tasks` further on, so the other families' tasks stay as they were. A family not named keeps all its
    phrasings. GRPO still draws every phrasing, so the phrasings held back here are ones only GRPO sees. needle has 8
    train phrasings, kv_chain 7 and pairs 1. Holding phrasings back leaves GRPO more to learn and makes the warm
    start weaker (docs/main_job.md, "Why the recipe is what it is")."""

    seed: int = Field(500_000, ge=0, lt=1_000_000)
    """First task seed of the SFT data; task i takes seed `seed + i` in the train block, clear of the pinned train
    split (seeds 0-999) that GRPO draws from."""

    fix_fraction: float = Field(0.25, ge=0.0, le=1.0)
    """Share of episodes whose first turn is a wrong attempt (an error or an empty result) fixed in the next turn."""

    epochs: float = Field(2.0, gt=0)
    """Passes over the recorded examples."""

    learning_rate: float = Field(1e-3, gt=0)
    """LoRA learning rate. A zero-initialised adapter on a small model learns the programs in a few dozen steps at
    1e-3: on 120 examples, 30 steps took the embedded model's loss from 0.77 to 0.05."""

    batch_size: int = Field(4, ge=1)
    """Examples per optimizer step."""

    micro_batch_size: int = Field(1, ge=1)
    """Examples per forward pass, padded to the longest (no packing); `batch_size` must be a multiple of it and the
    rest is gradient accumulation. The step's loss is the mean over its trained tokens either way, so only the speed
    changes: 1 wastes no compute on padding, 105 against 131-138 s for 24 demo SFT rows (micro 2: 118 s; 2-core AMD
    EPYC, bf16), with the same losses to four digits. On a GPU a larger micro-batch fills the device better. With
    `share_prefix` on (the CPU default) a step is one packed pass instead and this stays 1."""

    share_prefix: bool | Literal["auto"] = "auto"
    """Forward each optimizer step's `batch_size` rows as one packed row in which a prefix two rows share (the system
    prompt, an episode's earlier turns) is forwarded once (`trainer/sft_pack.py`): the same loss and gradients as
    one row a pass, on fewer tokens (a demo SFT file's steps forward about 0.63x the tokens of their rows; the share
    is `forwarded_token_frac` in sft_metrics.json and each step's line of sft_log.jsonl). The packed row needs the
    `segment_sdpa` attention, which reads the prefix tree from the position ids, and the model is loaded with it
    when this is on. `auto` is on where CUDA is absent and `micro_batch_size` is 1, the CPU setting, where every
    token costs its share of two cores; on a GPU, padded micro-batches under transformers' attention fill the device
    and a shared prefix saves little. `true` cannot be combined with a `micro_batch_size` above 1: a step is one
    packed pass."""

    bf16: bool | Literal["auto"] = "auto"
    """bf16 autocast (weights stay fp32): `auto` turns it on where bf16 matmuls are native (CUDA, or a CPU with
    AMX or AVX512-BF16), where it was about 2x the fp32 fwd+bwd rate; on an AVX2-only CPU bf16 falls back to a
    scalar kernel (4.3 against 105 tok/s fp32, measured on a 2-core AMD EPYC), so auto stays in fp32 there."""

    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (TRL's SFT default is on). The embedded model's activations fit
    easily on CPU, so it is off: 277 against 253 tok/s with it on (16 SFT rows, 2 cores, bf16)."""

    max_length: int = Field(4096, ge=256)
    """Longest example in tokens; longer recordings are dropped, never truncated (a cut example teaches a cut answer)."""

    teacher: bool = True
    """Record scripted-teacher episodes of the built-in families (`n_tasks` of them) as SFT data. Imported task sets
    have no reference program, so the teacher never plays them; give `demonstrations` for those."""

    demonstrations: str = ""
    """A JSONL of your own demonstrations, one `{"messages": [...]}` conversation a line (docs/tasks.md), added to
    the teacher's rows. Each is laid out in tokens as the env server lays out an episode and refused when that
    differs from the chat template's rendering (the token-in/token-out contract)."""

    @model_validator(mode="after")
    def _check(self) -> "SftConfig":
        if not self.teacher and not self.demonstrations:
            raise ValueError("sft.teacher is false and sft.demonstrations is empty: SFT would have no data; "
                             "turn the teacher on or give a demonstrations file")
        if self.batch_size % self.micro_batch_size:
            raise ValueError(
                f"sft.batch_size ({self.batch_size}) is not a multiple of sft.micro_batch_size "
                f"({self.micro_batch_size}): set micro_batch_size to a divisor of batch_size"
            )
        if self.share_prefix is True and self.micro_batch_size > 1:
            raise ValueError(
                f"sft.share_prefix = true forwards each step's sft.batch_size rows as one packed row, so "
                f"sft.micro_batch_size ({self.micro_batch_size}) cannot apply: set micro_batch_size to 1, or "
                f"share_prefix to false (or \"auto\") to keep padded micro-batches"
            )
        return self
