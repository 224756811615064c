"""The Python part of bench/gpu_device_check.sh: what a GPU machine without vLLM, TRL or network can check of the
one-GPU GRPO path, in a few minutes, as one JSON object with `targets`.

1. The attention fallback: `trainer.attention = "auto"` tries TRL's Hub kernel, which cannot download here, so it
   must fall back to `segment_sdpa` with a warning; packed rows through it must equal each sequence run alone.
2. TRL 1.15's AsyncGRPOTrainer (from its wheel, which the shell script unpacks) taking bf16 LoRA steps on the GPU on
   a tiny Qwen2 model and tokenizer built here, fed by an in-process rollout worker with made-up samples (no vLLM).
3. The weight sync's transfer between two processes on the one GPU: every sync of that run goes through
   `DiskMergedSync`, the one-GPU backend, to a second process that plays vLLM's side (`--serve`): it loads each
   merged directory onto the GPU and hashes every tensor's bytes. They must equal the hashes of what the trainer sent.

    python bench/gpu_device_check.py [--device cuda|cpu] [--steps 3]     (cpu: to test this script without a GPU)
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def tensor_hash(t) -> str:
    import torch

    flat = t.detach().to("cpu").contiguous().view(-1)
    return hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest()


# --- the receiving process: vLLM's side of the disk sync, on the same GPU ------------------------------------------

def serve(port_file: str, device: str) -> None:
    """Answer the routes DiskMergedSync calls; on reload_weights load the directory onto `device` and hash it."""
    from safetensors.torch import load_file

    loads: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):  # quiet: the JSON on stdout is the report
            pass

        def _answer(self, doc) -> None:
            body = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self._answer({"loads": loads} if self.path.startswith("/loads") else {"merged_version": 0})

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n) or b"{}")
            if self.path.startswith("/collective_rpc"):
                d = Path(body["kwargs"]["weights_path"])
                tensors = {k: v for f in sorted(d.glob("*.safetensors")) for k, v in load_file(f, device=device).items()}
                loads.append({k: tensor_hash(v) for k, v in tensors.items()}
                             | {"__device__": str(next(iter(tensors.values())).device), "__pid__": str(os.getpid())})
            self._answer({"success": True})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Path(port_file).write_text(str(server.server_address[1]))
    server.serve_forever()


# --- the trainer's side --------------------------------------------------------------------------------------------

def tiny_model(path: Path) -> None:
    """A tiny Qwen2 (tied embeddings, like Qwen2.5-1.5B) and a word-level tokenizer, saved to `path`."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    words = ["<pad>", "<eos>", "<unk>"] + [f"w{i}" for i in range(125)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    fast.save_pretrained(path)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(words), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    Qwen2ForCausalLM(cfg).save_pretrained(path)


class MadeUpRollouts:
    """An in-process rollout worker (TRL's RolloutWorkerProtocol): groups of 2 samples at the live policy version,
    random tokens, logprobs of -2 and advantages of +-1. It stands in for vLLM only; everything after the queue is
    TRL's own training step."""

    def __init__(self, vocab: int):
        self.rollout_buffer: queue.Queue = queue.Queue(maxsize=64)
        self.metrics_queue: queue.Queue = queue.Queue()
        self.vocab, self.version, self.stopped = vocab, 0, threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._produce, daemon=True).start()

    def _produce(self) -> None:
        import random

        from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

        rng, group = random.Random(0), 0
        while not self.stopped.is_set():
            for adv in (1.0, -1.0):
                n_prompt, n_completion = rng.randint(8, 24), rng.randint(8, 40)
                ids = [rng.randrange(3, self.vocab) for _ in range(n_prompt + n_completion)]
                sample = RolloutSample(prompt=[{"role": "user", "content": "p"}], completion=[], input_ids=ids,
                                       completion_mask=[0] * n_prompt + [1] * n_completion,
                                       old_log_probs=[0.0] * n_prompt + [-2.0] * n_completion, advantage=adv,
                                       model_version=self.version, group_id=group, metrics={"reward": adv},
                                       enqueued_at=time.time())
                while not self.stopped.is_set():
                    try:
                        self.rollout_buffer.put(sample, timeout=0.2)
                        break
                    except queue.Full:
                        pass
            group += 1

    def stop(self) -> None:
        self.stopped.set()

    def update_model_version(self, model_version: int) -> None:
        self.version = model_version

    def check_health(self, stale_after_s: float) -> None:
        pass


def attention_check(device: str) -> dict:
    import torch

    from fathom.trainer import attention, cpu_compat

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        choice = attention.choose("auto", cuda=device == "cuda")
    warned = [str(w.message) for w in caught if "cannot load" in str(w.message)]
    # packed rows (position ids restarting per sequence) against each sequence alone, fp32 so only the packing differs
    torch.manual_seed(1)
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256)
    cfg._attn_implementation = cpu_compat.SEGMENT_SDPA
    model = LlamaForCausalLM(cfg).to(device).eval()
    lens = [17, 40, 9]
    seqs = [torch.randint(0, 97, (n,), device=device) for n in lens]
    with torch.no_grad():
        packed = model(torch.cat(seqs)[None], position_ids=torch.cat([torch.arange(n, device=device) for n in lens])[None]
                       ).logits[0]
        alone = torch.cat([model(s[None]).logits[0] for s in seqs])
    return {"choice": choice, "warning": warned[0] if warned else None,
            "packed_vs_alone_max_abs": float((packed - alone).abs().max())}


def trainer_check(device: str, steps: int, work: Path, attn: str) -> dict:
    import torch

    from fathom.trainer import attention, cpu_compat
    from fathom.trainer.weight_sync import DiskMergedSync

    cuda = device == "cuda"
    if not cuda:
        cpu_compat.apply(force=True)
    else:
        attention.install(attn)  # what attention_check chose: the Hub is asked once
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

    model_dir = work / "model"
    tiny_model(model_dir)
    port_file = work / "port"
    receiver = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file), "--device", device])
    try:
        deadline = time.monotonic() + 60
        while not port_file.is_file() or not port_file.read_text():
            if receiver.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the receiving process did not start")
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port_file.read_text()}"
        sent: list[dict[str, str]] = []

        class Recorded(DiskMergedSync):
            def send_weights(self, iterator):
                tensors = list(iterator)
                sent.append({n: tensor_hash(t) for n, t in tensors})
                super().send_weights(iter(tensors))

        import httpx

        transfer = Recorded(directory=work / "merged", vllm_url=url, proxy_url=url, http=httpx.Client(timeout=120))
        args = AsyncGRPOConfig(output_dir=str(work / "run"), max_steps=steps, learning_rate=1e-3, num_generations=2,
                               per_device_train_batch_size=2, gradient_accumulation_steps=1, max_staleness=steps + 1,
                               token_budget=256, bf16=cuda, dtype="bfloat16" if cuda else "float32", use_cpu=not cuda,
                               save_strategy="no", logging_steps=1, report_to="none", disable_tqdm=True,
                               vllm_server_base_url=url, max_completion_length=64, seed=0)
        tok = AutoTokenizer.from_pretrained(model_dir)
        worker = MadeUpRollouts(len(tok))
        lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                              "up_proj", "down_proj"], task_type="CAUSAL_LM")
        # The prompts only feed a rollout worker; this one makes its samples up, so plain rows do (no `datasets`).
        trainer = AsyncGRPOTrainer(model=str(model_dir), args=args, processing_class=tok, peft_config=lora,
                                   train_dataset=[{"prompt": "w1 w2"}] * 4,
                                   rollout_worker=worker, weight_transfer=transfer.bind(None))
        transfer.bind(trainer)
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)
        t0 = time.monotonic()
        trainer.train()
        wall = time.monotonic() - t0
        worker.stop()
        loads = httpx.get(f"{url}/loads", timeout=30).json()["loads"]
    finally:
        receiver.terminate()
        receiver.wait(timeout=30)
    losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    param = next(p for n, p in trainer.model.named_parameters() if "lora_B" in n)
    received = [{k: v for k, v in ld.items() if not k.startswith("__")} for ld in loads]
    return {"steps": trainer.state.global_step, "losses": losses, "train_s": round(wall, 1),
            "param_device": str(param.device), "autocast_bf16": bool(args.bf16),
            "peak_mem_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2) if cuda else None,
            "syncs_sent": len(sent), "syncs_received": len(loads),
            "receiver": {"pid": loads[0]["__pid__"], "device": loads[0]["__device__"]} if loads else None,
            "tensors_per_sync": len(sent[0]) if sent else 0,
            "bit_exact": bool(sent) and sent == received,
            "sync_s": [round(s, 3) for s in transfer.sync_seconds]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(a.serve, a.device)
        return
    import torch

    out: dict = {"device": a.device, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
                 "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    if a.device == "cuda" and not torch.cuda.is_available():
        out["error"] = "torch sees no CUDA device"
    else:
        try:
            import trl

            out["trl"] = trl.__version__
            with contextlib.redirect_stdout(sys.stderr):  # stdout carries the JSON alone
                out["attention"] = attention_check(a.device)
                with tempfile.TemporaryDirectory() as d:
                    out["trainer"] = trainer_check(a.device, a.steps, Path(d), out["attention"]["choice"])
        except Exception as e:  # noqa: BLE001 - the report says what broke; the targets below then fail
            import traceback

            out["error"] = f"{type(e).__name__}: {e}"
            out["traceback"] = traceback.format_exc()[-3000:]
    # which of TRL's imports were answered by bench/device_shims (the machine lacked the package)
    out["import_stand_ins"] = [m for m in ("datasets", "aiohttp") if "device_shims" in
                               str(getattr(sys.modules.get(m), "__file__", "") or "")] or None
    att, tr = out.get("attention") or {}, out.get("trainer") or {}
    losses = tr.get("losses") or []
    out["targets"] = [
        {"name": "trainer_steps_on_device", "value": tr.get("steps"), "target": f">= {a.steps} on {a.device}",
         "met": tr.get("steps", 0) >= a.steps and tr.get("param_device", "").startswith(a.device)
         and bool(losses) and all(x == x and abs(x) != float("inf") for x in losses)},
        {"name": "sync_transfer_completes", "value": tr.get("syncs_received"),
         "target": "every sync received by a second process on the device",
         "met": bool(tr.get("syncs_sent")) and tr.get("syncs_received") == tr.get("syncs_sent")
         and (tr.get("receiver") or {}).get("device", "").startswith(a.device)
         and (tr.get("receiver") or {}).get("pid") != str(os.getpid())},
        {"name": "weights_bit_exact", "value": tr.get("bit_exact"), "target": "true", "met": tr.get("bit_exact") is True},
        {"name": "attention_fallback", "value": att.get("choice"),
         "target": "sdpa per packed sequence when the Hub kernel cannot load; packed == alone (< 1e-4)",
         "met": bool(att) and (att.get("choice") == "kernels-community/flash-attn3" or
                               (att.get("choice") == "fathom_segment_sdpa" and (a.device == "cpu" or att.get("warning"))))
         and att.get("packed_vs_alone_max_abs", 1.0) < 1e-4},
    ]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
