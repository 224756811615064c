"""This machine's limits, measured in the run that is compared against them, and the work a model's step does.

A throughput on its own says nothing about the room left; a fraction of what the cores can do does. So each
speed benchmark (and the SFT stage) measures, on the cores and at the dtype it runs with:
- the peak matmul rate (square torch matmuls; the best single one, since none can beat the hardware, so a
  loaded machine lowers the figure less than a mean would), and
- the memory bandwidth (a torch copy between two buffers that together outgrow the last-level cache; read +
  write bytes),
and divides achieved FLOP/s (training, decode) or bytes/s (decode) by them.

FLOPs count the model's work, not the hardware's: a recomputed forward (gradient checkpointing) and padding are
not counted. Every `nn.Linear` costs 2 FLOPs per weight per token forward; backward computes the input
gradient of every linear (2 more) and the weight gradient only of trainable ones (2 more). So a LoRA model
costs 4 x frozen + 6 x trainable weights per token, and full fine-tuning the usual 6 x params. Attention is
causal: token i of a sequence attends to i + 1 tokens (QK^T and AV, 4 x heads x head_dim FLOPs each), and its
backward is twice its forward.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _torch_dtype(dtype: str):
    import torch

    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r}: limits are measured for {', '.join(DTYPE_BYTES)}; pass one of those")
    return getattr(torch, dtype)


def matmul_peak(dtype: str = "float32", seconds: float = 1.5, sizes: tuple[int, ...] = (512, 1024, 2048)) -> float:
    """FLOP/s of the fastest single square matmul of these sizes at `dtype`, on this thread's cores and torch's
    thread count, over about `seconds`. Several sizes, because the best one depends on the cache and on the
    kernel (one core, AVX-512: fp32 peaks at 512, whose operands fit in L2; AMX bf16 at 1,024)."""
    import torch

    dt = _torch_dtype(dtype)
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n).to(dt), torch.randn(n, n).to(dt)
        out = torch.empty(n, n, dtype=dt)
        torch.mm(a, b, out=out)  # first call: oneDNN/BLAS set-up, weight packing
        end = time.perf_counter() + seconds / len(sizes)
        while True:
            t0 = time.perf_counter()
            torch.mm(a, b, out=out)
            best = max(best, 2 * n**3 / (time.perf_counter() - t0))
            if time.perf_counter() > end:
                break
    return best


def _last_level_cache_bytes() -> int:
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            sizes.append(int(text.rstrip("KMG")) * scale)
        except ValueError:
            continue
    return max(sizes, default=32 << 20)


def copy_bandwidth(seconds: float = 1.5, nbytes: int | None = None) -> float:
    """Bytes/s (read + write) of the fastest torch copy between two buffers of `nbytes` (default: the
    last-level cache, 256 to 512 MiB, so the two buffers together outgrow it) over about `seconds`."""
    import torch

    n = nbytes or min(max(_last_level_cache_bytes(), 256 << 20), 512 << 20)
    src = torch.ones(n // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)  # touches every page of dst before timing
    best = 0.0
    end = time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        dst.copy_(src)
        best = max(best, 2 * src.numel() * 4 / (time.perf_counter() - t0))
        if time.perf_counter() > end:
            break
    return best


@contextmanager
def on_cores(cores: list[int] | None) -> Iterator[None]:
    """Run this thread, and torch's thread pool if it starts inside, on `cores` with one thread per core;
    None: leave both as they are. The old mask and thread count come back afterwards."""
    if not cores:
        yield
        return
    import torch

    old_mask, old_threads = os.sched_getaffinity(0), torch.get_num_threads()
    os.sched_setaffinity(0, cores)
    torch.set_num_threads(len(cores))
    try:
        yield
    finally:
        os.sched_setaffinity(0, old_mask)
        torch.set_num_threads(old_threads)


def measure(dtype: str, cores: list[int] | None = None, seconds: float = 1.5,
            copy_bytes: int | None = None) -> dict[str, Any]:
    """The matmul peak at `dtype` and the copy bandwidth (buffers of `copy_bytes`, default as `copy_bandwidth`),
    on `cores` (None: this thread's cores as they are)."""
    import torch

    with on_cores(cores):
        peak = matmul_peak(dtype, seconds)
        bw = copy_bandwidth(seconds, copy_bytes)
        where = sorted(os.sched_getaffinity(0))
        threads = torch.get_num_threads()
    return {"dtype": dtype, "cores": where, "threads": threads, "matmul_peak_flop_s": peak, "copy_bytes_s": bw}


def linear_weights(model: Any) -> tuple[int, int]:
    """(frozen, trainable) weight counts over every `nn.Linear` in `model` (LoRA's A and B are linears too;
    PEFT's wrapper is not, so a base weight is counted once)."""
    import torch

    frozen = trainable = 0
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            if m.weight.requires_grad:
                trainable += m.weight.numel()
            else:
                frozen += m.weight.numel()
    return frozen, trainable


def streamed_params(model: Any) -> int:
    """Parameters a decode step reads in full: every one outside `nn.Embedding` tables, whose rows are looked up
    (a tied LM head still reads the whole table, through its linear)."""
    import torch

    seen: dict[int, int] = {}
    for m in model.modules():
        if not isinstance(m, torch.nn.Embedding):
            seen.update({id(p): p.numel() for p in m.parameters(recurse=False)})
    return sum(seen.values())


def attention_shape(config: Any) -> tuple[int, int, int, int]:
    """(layers, query heads, kv heads, head_dim) of a transformers config."""
    c = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    return c.num_hidden_layers, heads, getattr(c, "num_key_value_heads", None) or heads, head_dim


def train_flops(frozen: int, trainable: int, layers: int, heads: int, head_dim: int, lengths: list[int],
                ancestors: list[int] | None = None) -> float:
    """Forward + backward FLOPs of training on sequences of these lengths (one packed row or several rows).
    `ancestors` (default none) are the tokens each sequence attends to before its own, forwarded elsewhere in its
    row: a branch of a shared-prefix row (`prefix_tree`) attends to its prefix, then causally to itself."""
    tokens = sum(lengths)
    linear = (4 * frozen + 6 * trainable) * tokens
    # forward: sum over i < n of 4 * heads * head_dim * (a + i + 1) per layer = 2 * heads * head_dim * n * (2a + n + 1)
    attn_fwd = sum(2 * layers * heads * head_dim * n * (2 * a + n + 1)
                   for n, a in zip(lengths, ancestors or [0] * len(lengths), strict=True))
    return linear + 3 * attn_fwd


def decode_flops_per_token(weights: int, layers: int, heads: int, head_dim: int, context: float) -> float:
    """Forward FLOPs of decoding one token that attends to `context` tokens (itself included)."""
    return 2 * weights + 4 * layers * heads * head_dim * context


def decode_bytes_per_token(weight_bytes: int, concurrency: int, kv_bytes_per_token: int, context: float) -> float:
    """Memory read per decoded token when `concurrency` sequences decode together: each step reads every weight
    once for all of them, and each sequence reads its own KV cache of `context` tokens."""
    if concurrency < 1:
        raise ValueError(f"concurrency {concurrency}: give the number of sequences decoding together (>= 1)")
    return weight_bytes / concurrency + kv_bytes_per_token * context


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype: str) -> int:
    """KV-cache bytes one token holds: a key and a value per layer and kv head."""
    return 2 * layers * kv_heads * head_dim * DTYPE_BYTES[dtype]


def fraction(achieved: float | None, peak: float | None) -> float | None:
    """achieved / peak rounded to 4 places; None when either is missing or the peak is not positive."""
    if achieved is None or not peak or peak <= 0:
        return None
    return round(achieved / peak, 4)


__all__ = ["DTYPE_BYTES", "attention_shape", "copy_bandwidth", "decode_bytes_per_token", "decode_flops_per_token",
           "fraction", "kv_bytes_per_token", "linear_weights", "matmul_peak", "measure", "on_cores", "streamed_params",
           "train_flops"]
