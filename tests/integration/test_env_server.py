"""The env server through the real capture proxy and sandbox, with scripted policies as the model.

One stack (scripted upstream -> proxy -> env server, each a subprocess) serves the module;
tests switch the upstream's policy and put it back.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from fathom.tasks import get_task, load_split, reference_solution
from tests.integration.env_server_stack import ROOT, free_port, run_episodes, run_factory, short_tasks


@pytest.fixture(scope="module")
def stack(scripted_stack):
    """The session's scripted stack (conftest), 64 episodes at once, on the reference policy."""
    scripted_stack.set_policy("reference")
    yield scripted_stack
    scripted_stack.set_policy("reference")


@pytest.fixture
def policy(stack):
    def use(name: str) -> None:
        stack.set_policy(name)

    yield use
    stack.set_policy("reference")


def correct(res: dict) -> bool:
    return bool(res["reward_components"] and res["reward_components"]["correct"])


def test_reference_policy_solves_the_test_split_with_64_concurrent_episodes(stack):
    ids = load_split("test")
    # Real-tokenizer replies: the longest reference program (kv_chain) takes ~390 tokens.
    results = run_episodes(stack.env_url, [{"task_id": i, "episode_id": f"ref-{i}", "sampling": {"max_tokens": 1024}}
                                           for i in ids])
    failures = [r for r in results if r["status"] != "done"]
    assert not failures, [(r["episode_id"], r["error"]) for r in failures[:5]]
    solved = sum(correct(r) for r in results) / len(results)
    assert solved >= 0.99, [(r["task_id"], r["answer"]) for r in results if not correct(r)][:10]
    assert all(r["episode_id"] == f"ref-{r['task_id']}" for r in results)
    r0 = results[0]
    assert r0["stop_reason"] == "final" and r0["reward"] == r0["reward_components"]["total"] > 0.5
    assert r0["total_tokens"] > 0 and r0["turns"][0]["call_id"]
    # The proxy recorded the root turn, keyed to the same session, valid for training.
    trace = httpx.get(f"{stack.proxy_url}/sessions/{r0['session_id']}/trace", timeout=30).json()
    meta = trace["turns"][0]["metadata"]
    assert meta["role"] == "root" and meta["depth"] == 0 and meta["valid"] is True
    assert trace["turns"][0]["node_id"] == r0["turns"][0]["call_id"]


def test_no_tools_policy_scores_close_to_zero(stack, policy):
    policy("no_tools")
    ids = load_split("test")
    results = run_episodes(stack.env_url, [{"task_id": i} for i in ids])
    assert all(r["status"] == "done" for r in results)
    assert sum(correct(r) for r in results) / len(results) <= 0.05
    assert sum(r["reward"] for r in results) / len(results) <= 0.15


def test_recursive_policy_builds_the_tree_through_the_proxy(stack, policy):
    policy("recursive")
    task_id = next(i for i in load_split("test") if len(get_task(i).context) >= 16384)
    (res,) = run_episodes(stack.env_url, [{"task_id": task_id}])
    assert res["status"] == "done" and correct(res) and len(res["turns"]) == 2
    root = res["turns"][0]
    plain = [n for n in root["subcalls"] if not n["turns"]]
    nested = [n for n in root["subcalls"] if n["turns"]]
    assert len(plain) == 2 and len(nested) == 1 and res["llm_calls"] == 3
    assert all(n["depth"] == 1 and n["parent_call_id"] == root["call_id"] and n["call_id"] for n in plain)
    assert nested[0]["prompt_chars"] > 9000 and nested[0]["response"]
    inner = nested[0]["turns"][0]
    assert inner["depth"] == 1 and inner["parent_call_id"] == root["call_id"] and inner["final_answer"]
    trace = httpx.get(f"{stack.proxy_url}/sessions/{res['session_id']}/trace", timeout=30).json()
    by_id = {t["node_id"]: t["metadata"] for t in trace["turns"]}
    for node_id in [n["call_id"] for n in plain] + [inner["call_id"]]:
        assert by_id[node_id]["role"] == "subcall" and by_id[node_id]["depth"] == 1
        assert by_id[node_id]["parent_call_id"] == root["call_id"]
    # Token path: the root chain first (turn 1 extends turn 0 across the sub-calls), then the nested
    # sub-episode's chain, then the plain llm() calls; all sent as token ids.
    ids = [t["node_id"] for t in trace["turns"]]
    assert ids[:2] == [t["call_id"] for t in res["turns"]] and ids[2] == inner["call_id"]
    assert set(ids[3:]) == {n["call_id"] for n in plain}
    assert by_id[res["turns"][1]["call_id"]]["extends_call_id"] == root["call_id"]
    assert all(m["kind"] == "completion" for m in by_id.values())
    info = httpx.get(f"{stack.proxy_url}/sessions/{res['session_id']}", timeout=30).json()
    assert not info["flagged"], info["flag_reasons"]
    assert info["calls_by_role"] == {"root": 2, "subcall": 3} and info["total_tokens"] == res["total_tokens"]


def test_crashing_code_goes_back_to_the_model_and_the_episode_goes_on(stack, policy):
    policy("crash")
    (res,) = run_episodes(stack.env_url, [{"task_id": load_split("test")[0]}])
    assert res["status"] == "done" and correct(res) and len(res["turns"]) == 2
    assert "RecursionError" in res["turns"][0]["outputs"][0]


def test_reply_without_code_gets_a_corrective_turn(stack, policy):
    policy("no_code")
    (res,) = run_episodes(stack.env_url, [{"task_id": load_split("test")[0], "limits": {"max_turns": 3}}])
    assert res["status"] == "done" and correct(res)
    assert [t["no_code"] for t in res["turns"]] == [True, False]


def test_proxy_unreachable_makes_the_episode_unscorable(stack):
    dead = f"http://127.0.0.1:{free_port()}"
    (res,) = run_episodes(stack.env_url, [{"task_id": load_split("test")[0], "proxy_url": dead}])
    assert res["status"] == "error" and res["reward"] is None and res["reward_components"] is None
    assert "unreachable" in res["error"]


def test_bad_input_table(stack):
    task_id = load_split("test")[0]
    with httpx.Client(base_url=stack.env_url, timeout=60) as c:
        r = c.post("/episodes", json={"task_id": "nosuch-1k-s1"})
        assert r.status_code == 404 and "nosuch-1k-s1" in r.json()["detail"]
        r = c.post("/reset", json={"task_id": "nosuch-1k-s1"})
        assert r.status_code == 404 and "unknown task id" in r.json()["detail"]
        r = c.post("/episodes", json={"family": "needle", "seed": 1})
        assert r.status_code == 422 and "length" in r.json()["detail"]
        r = c.post("/episodes", json={"task_id": task_id, "limits": {"max_turns": "many"}})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][-2:] == ["limits", "max_turns"]
        assert c.get("/episodes/never-started").status_code == 404
        # OpenEnv HTTP: reset, malformed action, step to FINAL, step after done.
        obs = c.post("/reset", json={"task_id": task_id, "episode_id": "http-1"}).json()["observation"]
        assert obs["episode_id"] == "http-1" and obs["context_chars"] > 0 and obs["turn"] == 0
        r = c.post("/step", json={"action": {"cod": "print(1)"}, "episode_id": "http-1"})
        assert r.status_code == 422 and any(e["loc"][-1] == "code" for e in r.json()["detail"])
        r = c.post("/step", json={"action": {"code": "print(1)"}})
        assert r.status_code == 422 and "episode_id" in r.json()["detail"]
        r = c.post("/step", json={"action": {"code": "print(len(context))"}, "episode_id": "http-1"})
        assert r.status_code == 200 and r.json()["observation"]["output"].strip() == str(obs["context_chars"])
        code = reference_solution(obs["question"])
        r = c.post("/step", json={"action": {"code": code}, "episode_id": "http-1"}).json()
        assert r["done"] is True and r["reward"] > 0.5 and r["observation"]["stop_reason"] == "final"
        r = c.post("/step", json={"action": {"code": "print(1)"}, "episode_id": "http-1"})
        assert r.status_code == 409 and "done" in r.json()["detail"]
        ok = c.post("/episodes", json={"task_id": task_id, "episode_id": "dup-1"})
        assert ok.status_code == 202
        assert c.post("/episodes", json={"task_id": task_id, "episode_id": "dup-1"}).status_code == 409


def test_generic_openenv_client_steps_over_websocket(stack):
    from openenv.core.generic_client import GenericEnvClient

    task_id = load_split("test")[1]
    with GenericEnvClient(base_url=stack.env_url).sync() as env:
        r = env.reset(task_id=task_id)
        obs = r.observation
        assert obs["task_id"] == task_id and obs["turn"] == 0 and not r.done
        assert obs["messages"][1]["content"].startswith(f"Question: {obs['question']}")
        r = env.step({"code": "print(len(context))"})
        assert r.observation["output"].strip() == str(obs["context_chars"]) and not r.done
        r = env.step({"code": reference_solution(obs["question"])})
        assert r.done and r.reward > 0.5 and r.observation["reward_components"]["correct"]
        state = env.state()
        assert state["done"] and state["step_count"] == 2 and state["stop_reason"] == "final"


def test_typed_client_and_llm_in_step_mode(stack):
    from fathom.env_server.client import RLMEnv
    from fathom.env_server.models import RLMAction

    session = httpx.post(f"{stack.proxy_url}/sessions", json={"trainable": False}, timeout=30).json()["session_id"]
    with RLMEnv(base_url=stack.env_url).sync() as env:
        r = env.reset(task_id=load_split("test")[2], proxy_url=stack.proxy_url, session_id=session, max_turns=2)
        assert r.observation.max_turns == 2
        r = env.step(RLMAction(code="print(llm('hello there'))"))
        assert r.observation.llm_calls == 1 and "scripted reply" in r.observation.output
        r = env.step(RLMAction(code="x = 1"))
        assert r.done and r.observation.stop_reason == "max_turns" and r.reward is not None
        assert r.observation.reward_components["correct"] is False
    info = httpx.get(f"{stack.proxy_url}/sessions/{session}", timeout=30).json()
    assert info["calls_by_role"] == {"subcall": 1}


def test_openenv_validate_accepts_the_server_and_the_manifest(stack):
    """OpenEnv's own `openenv validate` command, run through its Typer app in this process: the server under check
    is the real subprocess either way, and two CLI processes would only add OpenEnv's imports (about 4 s each)."""
    from typer.testing import CliRunner

    from openenv.cli.__main__ import app as openenv

    run = CliRunner().invoke(openenv, ["validate", "--url", stack.env_url, "--json"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["passed"] is True
    run = CliRunner().invoke(openenv, ["validate", str(Path(ROOT, "fathom/env_server")), "--level", "static",
                                       "--skip-build"])
    assert run.exit_code == 0 and "Verdict: PASS" in run.stdout, run.output


def test_two_env_servers_share_the_episodes(stack):
    """A second real env server behind the module's proxy: the rollout worker's factory uses both, and no episode
    fails."""
    second = stack.add_env_server()
    try:
        got = run_factory(stack.proxy_url, [stack.env_url, second], short_tasks(12), concurrency=4)
    finally:
        stack.stop_env_server(second)  # the stack is the session's: later modules get it as it was
    assert got["failed"] == 0, got
    assert all(c >= 3 for c in got["per_server"]), got  # least in flight, ties in turn: about half each
    assert got["in_flight_left"] == [0, 0]
