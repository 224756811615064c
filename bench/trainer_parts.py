"""bench/trainer.py's parts: progress on stderr, plain transformers fwd+bwd, the rollout load it runs under, and a
printer of each trainer step as it is logged. bench/attention.py uses `fwd_bwd` too."""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"[trainer bench {time.monotonic() - T0:6.0f} s] {msg}", file=sys.stderr, flush=True)


def plain_model(model_path: str, lora):
    """The embedded model with LoRA and the trainer's CPU attention, as plain transformers runs it."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from fathom.trainer import cpu_compat

    cpu_compat.apply(force=True)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32,
                                                                attn_implementation=cpu_compat.SEGMENT_SDPA), lora)
    model.train()
    return model


def plain_fwd_bwd(model, lengths: list[int], bf16: bool, reps: int = 1) -> float:
    """tokens/s of plain transformers fwd+bwd on one packed row of these lengths, timed `reps` times after a
    warm-up pass (each pass of a 4,096-token row is 30-60 s on one core)."""
    import torch

    ids = torch.randint(0, 40000, (1, sum(lengths)))
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


class StepPrinter:
    """Prints each step's times and rates to stderr as the trainer logs them to `metrics.jsonl`."""

    KEYS = (("perf/step_s", "step {:.1f} s"), ("perf/rollout_wait_s", "rollout wait {:.1f} s"),
            ("perf/fwd_bwd_s", "fwd+bwd {:.1f} s"), ("perf/forwarded_tok_s_fwd_bwd", "fwd+bwd {:.1f} tok/s"),
            ("perf/weight_sync_s", "sync {:.2f} s"), ("perf/weight_sync_write_s", "of which write {:.2f} s"),
            ("perf/weight_sync_reload_s", "reload {:.2f} s"), ("rollout/generated_tok_s", "rollouts {:.1f} tok/s"))

    QUIET_S = 60.0
    """With no step for this long, say how many rollouts have finished, so a slow step is seen to be moving."""

    def __init__(self, path: Path, name: str):
        self.path, self.name, self.seen, self.done = path, name, 0, threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.last = time.monotonic()

    def _loop(self) -> None:
        while not self.done.wait(2):
            self._print_new()
            if time.monotonic() - self.last > self.QUIET_S:
                self.last = time.monotonic()
                rollouts = self.path.with_name("rollouts.jsonl")
                n = len(rollouts.read_text().splitlines()) if rollouts.exists() else 0
                say(f"{self.name}: step {self.seen + 1} under way, {n} rollouts finished so far")
        self._print_new()

    def _print_new(self) -> None:
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return
        if len(lines) > self.seen:
            self.last = time.monotonic()
        for line in lines[self.seen:]:
            row = json.loads(line)
            if "kl" in row:
                parts = [fmt.format(row[k]) for k, fmt in self.KEYS if isinstance(row.get(k), (int, float))]
                say(f"{self.name} step {row.get('step')}: " + ", ".join(parts))
        self.seen = len(lines)

    def __enter__(self) -> "StepPrinter":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join(timeout=10)
