"""Session factory against fake proxy and env server (httpx MockTransport): reward forwarding, 409, failures."""

from __future__ import annotations

import json

import httpx
import pytest

from fathom.rollout_worker.record import RolloutRecord
from fathom.rollout_worker.rewards import RolloutLog, by_family, read_new, rollout_reward, summarize
from fathom.rollout_worker.session import (FathomSessionFactory, InvalidCaptureError, RolloutError, policy_versions,
                                           task_id_of)

TURN = {"node_id": "c1", "prompt_token_ids": [1, 2], "completion_token_ids": [3, 4], "per_token_logps": [-0.1, -0.2],
        "loss_mask": [0, 0, 1, 1], "metadata": {"trainable": True, "role": "root"}}
SUB = {**TURN, "node_id": "c2", "loss_mask": [0, 0, 0, 0], "metadata": {"trainable": False, "role": "subcall"}}
COMPONENTS = {"correctness": 1.0, "format": 1.0, "token_budget": -0.1, "recursion": 0.5, "tool_bonus": 0.05,
              "total": 0.9, "correct": True}


class Fake:
    def __init__(self, *, episode_status="done", reward=0.9, trace_status=200, start_status=202):
        self.episode_status, self.reward, self.trace_status, self.start_status = episode_status, reward, trace_status, start_status
        self.deleted: list[str] = []
        self.started: list[dict] = []

    def proxy(self, req: httpx.Request) -> httpx.Response:
        if req.method == "POST" and req.url.path == "/sessions":
            body = json.loads(req.content)
            assert body["trainable"] and body["sampling"]["top_p"] == 1.0
            return httpx.Response(201, json={"session_id": "s1", "policy_version": 3, "model": "m", "trainable": True})
        if req.url.path == "/sessions/s1/trace":
            if self.trace_status == 409:
                return httpx.Response(409, json={"error": {"code": "invalid_capture", "message":
                                                 "call c7 (#2, root): completion ids and logprobs differ in length"}})
            return httpx.Response(self.trace_status, json={"schema_version": 1, "turns": [TURN, SUB]})
        if req.method == "DELETE":
            self.deleted.append(req.url.path)
            return httpx.Response(200, json={})
        return httpx.Response(404)

    def env(self, req: httpx.Request) -> httpx.Response:
        if req.method == "DELETE":
            self.deleted.append(req.url.path)
            self.episode_status = "error"
        if req.method == "POST":
            self.started.append(json.loads(req.content))
            if self.start_status != 202:
                return httpx.Response(self.start_status, json={"detail": "unknown task"})
            return httpx.Response(202, json={"episode_id": "e1", "status": "pending"})
        done = self.episode_status == "done"
        return httpx.Response(200, json={
            "episode_id": "e1", "task_id": "needle-1k-s1", "session_id": "s1", "status": self.episode_status,
            "stop_reason": "final" if done else "cancelled" if req.method == "DELETE" else "error",
            "reward": self.reward if done else None,
            "reward_components": COMPONENTS if done else None, "error": None if done else "sandbox died",
            "turns": [{"index": 0, "subcalls": [{"depth": 1, "prompt_chars": 3, "prompt_preview": "x"}]}],
            "metadata": {"group": 7}})


def factory(fake: Fake, tmp_path, **kw) -> FathomSessionFactory:
    log = RolloutLog(tmp_path / "rollouts.jsonl")
    f = FathomSessionFactory(proxy_url="http://proxy", env_url="http://env", max_tokens=64, max_turns=2,
                             sampling={"temperature": 1.0}, on_failure=log.failure, **kw)
    f.proxy.http = httpx.Client(base_url="http://proxy", transport=httpx.MockTransport(fake.proxy))
    f.episodes.http = httpx.Client(base_url="http://env", transport=httpx.MockTransport(fake.env))
    return f


def test_create_pins_a_session_then_starts_the_episode_with_the_workers_id(tmp_path):
    fake = Fake()
    s = factory(fake, tmp_path).create([{"role": "user", "content": "needle-1k-s1"}], seed=7, episode_id="e1")
    assert (s.session_id, s.policy_version, s.task_id) == ("s1", 3, "needle-1k-s1")
    (body,) = fake.started
    assert body["episode_id"] == "e1" and body["session_id"] == "s1" and body["task_id"] == "needle-1k-s1"
    assert body["limits"]["max_turns"] == 2 and body["sampling"]["max_tokens"] == 64 and body["metadata"]["group"] == 7


def test_verify_forwards_the_env_servers_reward_and_the_trace_keeps_trainable_turns(tmp_path):
    s = factory(Fake(), tmp_path).create("needle-1k-s1", seed=7, episode_id="e1")
    assert s.wait_for_completion() == 0
    trace = s.fetch_training_trace()
    assert [t.node_id for t in trace.turns] == ["c1"]  # the zero-masked sub-call would fork TRL's chaining
    v = s.verify([])
    assert v.env_reward == 0.9 and v.metrics["reward/correctness"] == 1.0 and v.metrics["subcalls"] == 1
    assert s.record.result.episode_id == "e1" and s.record.result.reward == 0.9  # the rollout's own record
    s.close()
    s.close()
    assert s.factory.proxy  # closing twice is harmless


def test_closing_a_running_episode_cancels_it_before_the_proxy_session(tmp_path):
    """TRL closes live sessions when the worker stops: the episode is cancelled on its env server first (so it does
    not run on to a refused model call), then the proxy session closes; its env server slot is freed once."""
    fake = Fake(episode_status="running")
    f = factory(fake, tmp_path)
    s = f.create("needle-1k-s1", seed=7, episode_id="e1")
    assert f.balancer.in_flight == [1]
    s.close()
    s.close()
    assert fake.deleted == ["/episodes/e1", "/sessions/s1"] and f.balancer.in_flight == [0]
    assert s.wait_for_completion() == 1 and s.verify([]).env_reward is None


def test_closing_a_finished_episode_only_closes_the_proxy_session(tmp_path):
    fake = Fake()
    s = factory(fake, tmp_path).create("needle-1k-s1", seed=7, episode_id="e1")
    assert s.wait_for_completion() == 0
    s.close()
    assert fake.deleted == ["/sessions/s1"]


def test_fetched_trace_leaves_its_trained_turns_versions_in_the_rollouts_record(tmp_path):
    fake = Fake()
    record = RolloutRecord([{"role": "user", "content": "needle-1k-s1"}])  # what the rollout loop passes as the task
    s = factory(fake, tmp_path).create(record, seed=7, episode_id="e1")
    assert s.task_id == "needle-1k-s1" and s.record is record and record.policy_versions is None
    assert record.episode_id == "e1"  # the key the loop groups the rollout's training rows by
    assert fake.started[0]["task_id"] == "needle-1k-s1"
    TURN["metadata"].update(policy_version_start=3, policy_version=4)
    SUB["metadata"].update(policy_version_start=1, policy_version=1)  # not trained: does not count
    try:
        s.fetch_training_trace()
    finally:
        for t in (TURN, SUB):
            t["metadata"].pop("policy_version_start"), t["metadata"].pop("policy_version")
    assert record.policy_versions == (3, 4)
    other = factory(Fake(), tmp_path).create("needle-1k-s1", seed=7, episode_id="e2")  # a plain prompt gets its own
    assert other.record is not record and other.record.policy_versions is None and other.record.episode_id == "e2"


def test_policy_versions_span_every_turn_sent_to_answered():
    from types import SimpleNamespace as T

    assert policy_versions([T(metadata={"policy_version_start": 2, "policy_version": 2}),
                            T(metadata={"policy_version_start": 2, "policy_version": 3})]) == (2, 3)
    assert policy_versions([T(metadata={"policy_version": 5}), T(metadata={"policy_version": 5})]) == (5, 5)
    assert policy_versions([T(metadata={"policy_version": 4}), T(metadata={"policy_version": 6})]) == (4, 6)
    assert policy_versions([T(metadata={}), T(metadata={"role": "root"})]) is None


def test_errored_episode_is_unscorable_none_not_zero(tmp_path):
    s = factory(Fake(episode_status="error"), tmp_path).create("needle-1k-s1", seed=0, episode_id="e1")
    assert s.wait_for_completion() == 1
    assert s.verify([]).env_reward is None


def test_invalid_capture_stops_training_naming_session_and_turn(tmp_path):
    s = factory(Fake(trace_status=409), tmp_path).create("needle-1k-s1", seed=0, episode_id="e1")
    with pytest.raises(InvalidCaptureError, match=r"session s1.*call c7 \(#2, root\)") as e:
        s.fetch_training_trace()
    assert isinstance(e.value, ValueError)  # TRL turns ValueError into CaptureContractError: the worker stops


def test_other_trace_failures_are_rollout_errors(tmp_path):
    s = factory(Fake(trace_status=500), tmp_path).create("needle-1k-s1", seed=0, episode_id="e1")
    with pytest.raises(RolloutError):
        s.fetch_training_trace()


def test_refused_episode_closes_the_session_and_is_logged_unscorable(tmp_path):
    fake = Fake(start_status=404)
    with pytest.raises(Exception, match="404"):
        factory(fake, tmp_path).create("nosuch-1k-s1", seed=3, episode_id="e9")
    assert fake.deleted == ["/sessions/s1"]
    (rec,), _ = read_new(tmp_path / "rollouts.jsonl", 0)
    assert rec["unscorable"] and rec["reward"] is None and rec["task_id"] == "nosuch-1k-s1"


def test_each_rollout_is_logged_from_its_own_record_and_the_reward_function_forwards_the_total(tmp_path):
    # Two rollouts verified one after the other on one thread: each log line comes from its own record, so the
    # first is logged with its own reward, not the one verified last.
    right = factory(Fake(reward=0.9), tmp_path).create(RolloutRecord("needle-1k-s1"), seed=7, episode_id="e1")
    wrong = factory(Fake(reward=0.1), tmp_path).create(RolloutRecord("needle-1k-s1"), seed=7, episode_id="e1")
    verified = {}
    for name, s in (("right", right), ("wrong", wrong)):
        s.wait_for_completion()
        verified[name] = s.verify([])

    class Outcome:
        env_reward, timed_out = verified["right"].env_reward, False

    assert rollout_reward(Outcome()) == 0.9
    log = RolloutLog(tmp_path / "r.jsonl")
    log.verified(right.record)
    records, offset = read_new(tmp_path / "r.jsonl", 0)
    assert offset > 0 and records[0]["reward"] == 0.9 and records[0]["reward/token_budget"] == -0.1
    assert records[0]["group"] == 7 and records[0]["timed_out"] is False and records[0]["episode_id"] == "e1"
    summary = summarize(records + [{"unscorable": True, "reward": None}])
    assert summary["rollouts/unscorable_total"] == 1 and summary["reward/recursion"] == 0.5
    assert summary["episode/subcalls_mean"] == 1


def test_a_timed_out_rollout_is_logged_unscorable_and_timed_out(tmp_path):
    s = factory(Fake(episode_status="running"), tmp_path).create("needle-1k-s1", seed=7, episode_id="e1")
    with pytest.raises(TimeoutError):
        s.wait_for_completion(timeout_s=0.01)
    assert s.verify([]).env_reward is None
    log = RolloutLog(tmp_path / "r.jsonl")
    log.verified(s.record)
    log.verified(RolloutRecord("needle-1k-s1"))  # never verified: nothing to log
    (rec,), _ = read_new(tmp_path / "r.jsonl", 0)
    assert rec["timed_out"] is True and rec["reward"] is None and rec["unscorable"] and rec["status"] == "running"


def test_training_success_by_family_over_scorable_rollouts():
    records = [{"task_id": "needle-2k-s1", "reward/correct": 1.0}, {"task_id": "needle-16k-s2", "reward/correct": 0.0},
               {"task_id": "needle-2k-s3", "reward/correct": 1.0}, {"task_id": "kv_chain-128k-s4", "reward/correct": 0.0},
               {"task_id": "not-a-task-id", "reward/correct": 1.0},  # another id shape: no family, not counted
               {"task_id": "code_qa-2k-s5", "unscorable": True, "reward": None}]
    out = summarize(records)
    assert out["train_success/needle"] == pytest.approx(2 / 3) and out["train_rollouts/needle"] == 3
    assert out["train_success/kv_chain"] == 0.0 and out["train_rollouts/kv_chain"] == 1
    assert "train_success/code_qa" not in out  # its only rollout was unscorable: no success rate, not 0
    assert out["train/context_chars_mean"] == pytest.approx((2048 + 16384 + 2048 + 131072) / 4)
    assert by_family([]) == {}


def test_task_id_from_prompt_row():
    assert task_id_of("needle-1k-s1") == "needle-1k-s1"
    assert task_id_of([{"role": "user", "content": "kv_chain-2k-s5"}]) == "kv_chain-2k-s5"
    with pytest.raises(ValueError, match="task id"):
        task_id_of([])


def test_partial_last_line_waits_for_the_next_read(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"a": 1}\n{"b"')
    recs, off = read_new(p, 0)
    assert recs == [{"a": 1}] and off == len('{"a": 1}\n')
