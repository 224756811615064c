"""What TRL 1.15's AsyncGRPOTrainer needs to run without CUDA. Applied only when CUDA is absent.

TRL assumes CUDA in three places:
1. `attn_implementation="kernels-community/flash-attn3"` is hard-coded; on CPU we load with `segment_sdpa`
   (below): TRL's padding-free rows hold several sequences, `position_ids` resetting at each, and it runs
   causal SDPA on each sequence alone. transformers' own `sdpa` builds a block-diagonal [row, row] mask from
   those resets instead, and that masked SDPA made LoRA fwd+bwd 2.2-2.8x slower on CPU (bench/attention.py).
   It also reads shared-prefix rows (`prefix_tree.py`: a branch attends to the prompt it shares, forwarded once).
2. `get_peak_flops_per_device` calls `torch.cuda`; on CPU it returns `CPU_PEAK_FLOPS`.
3. The chunked log-prob kernel is Triton-only (and Triton is absent from CPU wheels); on CPU the fused
   LM head calls `TorchChunkedLogProb`, the same signature and outputs in plain torch.
A fourth guard is not about CUDA: `AsyncRolloutWorker` refuses to start without the `vllm` package,
which only its default turn loop uses. Our loop-owning worker talks to the capture proxy, so on CPU,
where vLLM lives in its own venv, that guard is answered for the worker module only.
"""

from __future__ import annotations

import importlib.util

import torch
from torch.utils.checkpoint import checkpoint

from fathom.trainer.prefix_tree import tree_runs
from fathom.trl_compat import TRL_VERSION, TrlVersionError, check_trl_version

CPU_PEAK_FLOPS = {"float32": 236e9, "bfloat16": 1409e9}
"""Measured 2048x2048 matmul throughput of this machine kind's 2 cores (fp32 AVX-512, bf16 AMX); MFU divides by it."""

TOKEN_CHUNK = 1024
"""Tokens per log-prob tile: [1024, vocab] fp32 logits is 200 MB for a 49k vocabulary, recomputed in backward."""

SEGMENT_SDPA = "fathom_segment_sdpa"
"""The attention implementation name `segment_sdpa` is registered under in transformers."""

_applied = False


def native_bf16() -> bool:
    """True when bf16 matmuls have hardware behind them: a CUDA device, or a CPU whose oneDNN has a bf16 path
    (AVX512-BF16 or AMX). Without it torch falls back to a scalar, single-threaded bf16 GEMM: measured on a 2-core
    AVX2 machine (AMD EPYC), LoRA fwd+bwd of the embedded model ran at 4.3 tok/s under bf16 autocast against
    105 tok/s in fp32."""
    if torch.cuda.is_available():
        return True
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def use_bf16(setting: bool | str, name: str) -> bool:
    """Resolve a bf16 setting (`true`, `false` or `"auto"`): auto is bf16 where `native_bf16()`. An explicit true
    on a CPU without native bf16 is honoured but warned about, naming the setting."""
    if setting == "auto":
        return native_bf16()
    if setting and not native_bf16():
        import warnings

        warnings.warn(f"{name} = true, but this CPU has no native bf16 matmul (no AVX512-BF16 or AMX): bf16 autocast "
                      f"runs about 25x slower than fp32 here. Set {name} = \"auto\" or false.", stacklevel=2)
    return bool(setting)


def _tile(hidden, weight, bias, targets, temperature, softcap, logit_scale, want_entropy):
    logits = hidden @ weight.t()
    if bias is not None:
        logits = logits + bias
    logits = logits.float() * logit_scale
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    logits = logits / temperature
    log_z = torch.logsumexp(logits, dim=-1)
    log_probs = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_z
    if not want_entropy:
        return log_probs, log_probs.new_zeros(())
    probs = torch.softmax(logits, dim=-1)
    entropy = log_z - (probs * logits).sum(-1)
    return log_probs, entropy


def _extras(hidden, weight, bias, targets, temperature, softcap, logit_scale):
    with torch.no_grad():
        logits = (hidden @ weight.t() + (bias if bias is not None else 0)).float() * logit_scale
        if softcap is not None:
            logits = softcap * torch.tanh(logits / softcap)
        logits = logits / temperature
        log_p = torch.log_softmax(logits, dim=-1)
        # argmax returns the first maximum, as TRL's kernel counts ties with an earlier token as not top-1
        return torch.logsumexp(2 * log_p, -1), logits.mean(-1), logits.argmax(-1) == targets


class TorchChunkedLogProb:
    """Drop-in for `trl.kernels.ChunkedLogProbFunction`: `apply(...)` returns (log_probs, entropy,
    log_sum_sq_probs, mean_logits, is_top1), None for outputs not requested. Each token tile is
    checkpointed, so backward recomputes its logits instead of keeping [N, vocab] alive."""

    @staticmethod
    def apply(hidden, weight, bias, targets, temperature, chunk_size=None, final_logit_softcapping=None,
              logit_scale=1.0, outputs=("log_probs",)):
        want_entropy = "entropy" in outputs
        want_extras = any(k in outputs for k in ("log_sum_sq_probs", "mean_logits", "is_top1"))
        grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
        lps, ents, sqs, means, tops = [], [], [], [], []
        for s in range(0, hidden.shape[0], TOKEN_CHUNK):
            args = (hidden[s:s + TOKEN_CHUNK], weight, bias, targets[s:s + TOKEN_CHUNK], temperature,
                    final_logit_softcapping, logit_scale)
            lp, ent = (checkpoint(_tile, *args, want_entropy, use_reentrant=False) if grad
                       else _tile(*args, want_entropy))
            lps.append(lp)
            ents.append(ent)
            if want_extras:
                sq, mean, top = _extras(*args)
                sqs.append(sq)
                means.append(mean)
                tops.append(top)
        if not lps:  # no label in this micro-batch: keep the graph connected with an empty tensor
            empty = hidden.sum(-1)[:0].float()
            lps, ents = [empty], [empty]
            sqs, means, tops = [empty], [empty], [empty.bool()]
        cat = torch.cat
        return (cat(lps), cat(ents) if want_entropy else None, cat(sqs) if "log_sum_sq_probs" in outputs else None,
                cat(means) if "mean_logits" in outputs else None, cat(tops) if "is_top1" in outputs else None)


_paths: list = [None, None]
"""The last row's position ids and its runs with their key indices: every layer of one forward asks for the same."""


def _row_paths(position_ids: torch.Tensor) -> list[tuple[int, int, torch.Tensor | None]]:
    cached, paths = _paths
    if cached is not None and cached.shape == position_ids.shape and torch.equal(cached, position_ids):
        return paths
    paths = [(s, e, torch.tensor([*anc, *range(s, e)], device=position_ids.device) if anc else None)
             for s, e, anc in tree_runs(position_ids)]
    _paths[:] = [position_ids.clone(), paths]
    return paths


def segment_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Causal attention of padding-free rows, one run at a time (`prefix_tree.tree_runs`): a packed sequence attends
    to itself causally, the same result as a block-diagonal causal mask; a branch of a shared-prefix row attends to
    its ancestors' keys and causally to itself. Query/key/value are [batch, heads, tokens, head_dim]; returns
    [batch, tokens, heads, head_dim] like transformers' attention functions. Rows with padding are refused: TRL's
    trainer never sends them."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if attention_mask is not None:
        raise ValueError(f"{SEGMENT_SDPA} takes padding-free rows (position_ids resetting per sequence) and no "
                         "attention mask; load the model with attn_implementation='sdpa' for padded batches")
    position_ids = kwargs.get("position_ids")
    if position_ids is None or query.shape[2] != key.shape[2]:  # one causal sequence, or decoding with a cache
        return sdpa_attention_forward(module, query, key, value, None, dropout, scaling, is_causal=True)
    rows = []
    for b in range(query.shape[0]):
        parts = []
        for s, e, keys in _row_paths(position_ids[b] if position_ids.shape[0] > 1 else position_ids[0]):
            q = query[b:b + 1, :, s:e]
            if keys is None:
                k, v, mask = key[b:b + 1, :, s:e], value[b:b + 1, :, s:e], None
            else:  # query i of the run sees every ancestor and the run up to itself
                k, v = key[b:b + 1].index_select(2, keys), value[b:b + 1].index_select(2, keys)
                mask = torch.ones(e - s, len(keys), dtype=torch.bool, device=q.device).tril(len(keys) - (e - s))
            parts.append(sdpa_attention_forward(module, q, k, v, mask, dropout, scaling, is_causal=mask is None)[0])
        rows.append(torch.cat(parts, dim=1))
    return torch.cat(rows, dim=0), None


def register_segment_sdpa() -> None:
    """Register `segment_sdpa` in transformers under SEGMENT_SDPA (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask

    AttentionInterface.register(SEGMENT_SDPA, segment_sdpa)
    # Its mask is flash attention's: none for unpadded rows, the 2D padding mask otherwise (which segment_sdpa
    # refuses). Unregistered, transformers would drop a padding mask without a word.
    ALL_MASK_ATTENTION_FUNCTIONS.register(SEGMENT_SDPA, flash_attention_mask)


def _cpu_peak_flops(accelerator, dtype: str) -> float | None:
    return CPU_PEAK_FLOPS.get(dtype)


def apply(force: bool = False) -> bool:
    """Patch TRL for CPU when CUDA is absent (or `force`); idempotent. Returns whether the patches are active."""
    global _applied
    check_trl_version()
    if _applied:
        return True
    if torch.cuda.is_available() and not force:
        return False
    from fathom.trainer import attention
    from fathom.trl_compat import trainer as trl_compat

    attention.install(attention.choose("sdpa", cuda=False))
    trl_compat.patch_peak_flops(_cpu_peak_flops)
    trl_compat.patch_chunked_logprob(TorchChunkedLogProb)
    if importlib.util.find_spec("vllm") is None:
        trl_compat.skip_vllm_guard()
    _applied = True
    return True


def reference_log_softmax(hidden, weight, targets, temperature=1.0):
    """The unfused reference the tests compare against: full logits, log_softmax, gather."""
    logits = (hidden @ weight.t()).float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


__all__ = ["CPU_PEAK_FLOPS", "TRL_VERSION", "TorchChunkedLogProb", "TrlVersionError", "apply", "check_trl_version",
           "reference_log_softmax", "register_segment_sdpa"]
