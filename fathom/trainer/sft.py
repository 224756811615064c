"""SFT warm start: LoRA fine-tuning on recorded teacher episodes, loss on the model's own turns only.

Rows come from the captured traces through TRL's own chaining (`trl_compat.rollout.chain_trace`), the function
GRPO uses: an SFT row and a GRPO row of the same episode hold the same tokens under the same mask. Labels are the
token where the mask is 1 (a token the teacher wrote in an assistant turn) and -100 elsewhere (system prompt,
question, REPL output, template tokens).

On a CPU each optimizer step's rows are forwarded as one packed row in which a prefix they share is forwarded once
(`sft.share_prefix`, `sft_pack.py`); elsewhere as micro-batches of padded rows. The loss is the same either way.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Callable

from fathom.trainer.sft_pack import IGNORE


def rows_from_trace(trace: Any, rollout_id: Any = 0) -> list[dict[str, Any]]:
    """One row per conversation with trained tokens: `input_ids`, `labels` (-100 off the assistant turns) and `role`
    (`root`, or `subcall` for an llm() reply the teacher wrote).

    Each conversation (the proxy's `conversation` metadata; a plain sub-call is one of its own) goes through TRL's
    chaining on its own, in trace order. The proxy's trace keeps a conversation's turns adjacent, so these are the
    rows TRL makes of the whole trace in GRPO; chaining them apart tells which role each row has."""
    from fathom.trl_compat.rollout import chain_trace

    groups: dict[str, list[Any]] = {}
    for turn in trace.turns:
        role = turn.metadata.get("role") or "root"
        # As the proxy links calls (capture_proxy/sessions.py): a root call that names no conversation is in the
        # root one; a plain sub-call is a conversation of its own.
        key = turn.metadata.get("conversation") or ("root" if role == "root" else turn.node_id)
        groups.setdefault(str(key), []).append(turn)
    rows = []
    for turns in groups.values():
        # Fork threshold 0: a turn that does not extend its conversation starts a new row rather than being
        # realigned, so no teacher token is ever relabelled as context.
        part = trace.model_copy(update={"turns": turns})
        sequences, _tally = chain_trace(part, rollout_id, 0)
        role = str(turns[0].metadata.get("role") or "root")
        for seq in sequences:
            labels = [t if m else IGNORE for t, m in zip(seq.input_ids, seq.completion_mask)]
            rows.append({"input_ids": list(seq.input_ids), "labels": labels, "role": role})
    return rows


def _lora_config(lora: Any):
    from peft import LoraConfig

    return LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                      target_modules=list(lora.target_modules), task_type="CAUSAL_LM")


def share_prefix_on(sft: Any, cuda: bool) -> bool:
    """Whether `sft.share_prefix` packs this run's steps as shared-prefix rows (`auto`: `SftConfig.share_prefix`)."""
    if sft.share_prefix == "auto":
        return not cuda and sft.micro_batch_size == 1
    return bool(sft.share_prefix)


def _flop_limit(model: Any, tally: Any, epochs: float, wall: float, bf16: bool) -> dict[str, Any]:
    """The run's fwd+bwd FLOP/s (LoRA counted as trained, padding not; each sequence the steps forwarded, a
    shared prefix once) against this machine's matmul peak at the dtype it trained in, measured now on the cores
    it trained on (`fathom.trainer.limits`)."""
    from fathom.trainer import limits

    frozen, trainable = limits.linear_weights(model)
    layers, heads, _kv, head_dim = limits.attention_shape(model.config)
    lengths, ancestors = [n for n, _ in tally.runs], [a for _, a in tally.runs]
    run = limits.train_flops(frozen, trainable, layers, heads, head_dim, lengths, ancestors)
    achieved = run / wall if wall and run else None
    machine = limits.measure("bfloat16" if bf16 else "float32")
    return {"flops_per_epoch": run / epochs, "achieved_flop_s": round(achieved) if achieved else None,
            "flop_fraction_of_peak": limits.fraction(achieved, machine["matmul_peak_flop_s"]),
            "matmul_dtype": machine["dtype"], "matmul_peak_flop_s": round(machine["matmul_peak_flop_s"]),
            "copy_bytes_s": round(machine["copy_bytes_s"]), "cores": machine["cores"]}


def build_trainer(model: Any, tok: Any, rows: list[dict[str, list[int]]], out_dir: Path, *, sft: Any, lora: Any,
                  share: bool, total: int, tally: Any, callbacks: tuple[Any, ...] = ()) -> Any:
    """TRL's SFTTrainer on `rows` for `total` optimizer steps of `sft.batch_size` rows: with `share`, each step one
    shared-prefix packed row (`sft_pack`; `model` must attend with `segment_sdpa`), else micro-batches of
    `sft.micro_batch_size` padded rows with gradient accumulation. Every micro-batch it trains goes to `tally`."""
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from fathom.trainer import cpu_compat
    from fathom.trainer.sft_pack import SharedPrefixCollator

    attn = getattr(model.config, "_attn_implementation", None)
    if share and attn != cpu_compat.SEGMENT_SDPA:
        raise ValueError(f"shared-prefix SFT rows need the {cpu_compat.SEGMENT_SDPA} attention, which reads the prefix "
                         f"tree from the position ids; the model attends with {attn!r}: load it with "
                         f"attn_implementation={cpu_compat.SEGMENT_SDPA!r} or set sft.share_prefix = false")

    class TalliedSFTTrainer(SFTTrainer):
        def training_step(self, model, inputs, *args, **kwargs):
            tally.add(inputs)
            return super().training_step(model, inputs, *args, **kwargs)

    micro = sft.batch_size if share else sft.micro_batch_size
    args = SFTConfig(
        output_dir=str(out_dir / "trainer"),
        learning_rate=sft.learning_rate,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=sft.batch_size // micro,
        max_steps=total,
        lr_scheduler_type="cosine",
        warmup_steps=max(1, total // 10),
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        bf16=cpu_compat.use_bf16(sft.bf16, "sft.bf16"),
        gradient_checkpointing=sft.gradient_checkpointing,
        use_cpu=not torch.cuda.is_available(),
        max_length=None,  # rows longer than sft.max_length were dropped, never cut
        packing=False,  # TRL's packing concatenates rows whole; a shared-prefix step packs them in its own collator
        dataloader_num_workers=0,
        seed=sft.seed,
        disable_tqdm=True,
    )
    data = Dataset.from_list([{"input_ids": r["input_ids"], "labels": r["labels"]} for r in rows])
    trainer = TalliedSFTTrainer(model=model, args=args, train_dataset=data, processing_class=tok,
                      data_collator=SharedPrefixCollator() if share else None, peft_config=_lora_config(lora),
                      callbacks=list(callbacks))
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # with disable_tqdm it prints every log dict; the caller's bar shows loss
    return trainer


def train_sft(
    model_dir: str | Path,
    rows: list[dict[str, list[int]]],
    out_dir: Path,
    *,
    sft: Any,
    lora: Any,
    on_step: Callable[[int, int, float], None] | None = None,
) -> dict[str, Any]:
    """Train a LoRA adapter with TRL's SFTTrainer (`build_trainer`); writes `out_dir/adapter` (PEFT) and returns the
    run's metrics."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from fathom.trainer import cpu_compat
    from fathom.trainer.sft_pack import StepTally

    cpu_compat.apply()  # TRL's fused LM head calls a Triton kernel; without CUDA it gets the pure-torch one
    if not rows:
        raise ValueError("no SFT examples: every recorded episode failed or was longer than sft.max_length")
    share = share_prefix_on(sft, torch.cuda.is_available())
    tok = AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if share:
        cpu_compat.register_segment_sdpa()
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, **({"attn_implementation": cpu_compat.SEGMENT_SDPA} if share else {}))
    steps_per_epoch = math.ceil(len(rows) / sft.batch_size)
    total = max(1, math.ceil(steps_per_epoch * sft.epochs))
    log: list[dict[str, Any]] = []
    tally = StepTally()

    class Progress(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                log.append({"step": state.global_step, **{k: float(v) for k, v in logs.items()},
                            "forwarded_token_frac": tally.take()})
                if on_step:
                    on_step(state.global_step, total, float(logs["loss"]))

    trainer = build_trainer(model, tok, rows, out_dir, sft=sft, lora=lora, share=share, total=total, tally=tally,
                            callbacks=(Progress(),))
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    _save_adapter(trainer.model, tok, out_dir)
    tokens = sum(len(r["input_ids"]) for r in rows)
    trained = sum(1 for r in rows for t in r["labels"] if t != IGNORE)
    limit = _flop_limit(trainer.model, tally, sft.epochs, wall, trainer.args.bf16)
    metrics = {"examples": len(rows), "steps": total, "epochs": sft.epochs, "wall_s": round(wall, 1),
               "tokens_per_epoch": tokens, "trained_tokens_per_epoch": trained,
               "tokens_per_s": round(tokens * sft.epochs / wall, 1) if wall else None,
               "share_prefix": share, "forwarded_tokens": tally.forwarded, "forwarded_token_frac": tally.frac(),
               **limit, "first_loss": log[0]["loss"] if log else None, "last_loss": log[-1]["loss"] if log else None}
    (out_dir / "sft_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    (out_dir / "sft_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


def _save_adapter(model: Any, tok: Any, out_dir: Path) -> None:
    adapter = out_dir / "adapter"
    tmp = out_dir / "adapter.tmp"
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if adapter.exists():
        import shutil

        shutil.rmtree(adapter)
    tmp.rename(adapter)  # a half-written adapter is never seen under its final name
