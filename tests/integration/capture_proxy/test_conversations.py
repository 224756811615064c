"""Conversations in a trace: each one's turns listed together, so TRL chains it into exactly one row.

The calls below have the shape the env server's harness sends on the token path: a root conversation
whose turn 1 follows interleaved plain `llm()` calls and a nested sub-episode (its own conversation).
"""

from __future__ import annotations

import pytest
from openenv.core.harness.training import TrainingTrace


def _call(proxy, sid: str, prompt: list[int], role: str = "root", depth: int = 0, conversation: str | None = None,
          parent: str | None = None) -> dict:
    headers = {"Authorization": f"Bearer {sid}", "X-Fathom-Role": role, "X-Fathom-Depth": str(depth)}
    if conversation:
        headers["X-Fathom-Conversation"] = conversation
    if parent:
        headers["X-Fathom-Parent"] = parent
    r = proxy.http.post("/v1/completions", json={"model": "policy", "prompt": prompt}, headers=headers)
    assert r.status_code == 200, r.text
    return {"id": r.headers["X-Fathom-Call-Id"], "prompt": prompt, "ids": r.json()["choices"][0]["token_ids"]}


def episode(proxy, sid: str) -> dict[str, dict]:
    """Arrival order: root0, plain, nested0, plain, nested1, root1, plain."""
    c: dict[str, dict] = {}
    c["root0"] = _call(proxy, sid, [1, 2, 3], conversation="root-a")
    c["plain0"] = _call(proxy, sid, [1, 9], "subcall", 1, parent=c["root0"]["id"])
    c["nested0"] = _call(proxy, sid, [1, 5, 5], "subcall", 1, "nested-b", c["root0"]["id"])
    c["plain1"] = _call(proxy, sid, [1, 8], "subcall", 2, parent=c["nested0"]["id"])
    n = c["nested0"]
    c["nested1"] = _call(proxy, sid, n["prompt"] + n["ids"] + [6, 6], "subcall", 1, "nested-b", c["root0"]["id"])
    r = c["root0"]
    c["root1"] = _call(proxy, sid, r["prompt"] + r["ids"] + [7, 7], conversation="root-a")
    c["plain2"] = _call(proxy, sid, [1, 4], "subcall", 1, parent=c["root1"]["id"])
    return c


def _trace(proxy, sid) -> TrainingTrace:
    r = proxy.http.get(f"/sessions/{sid}/trace")
    assert r.status_code == 200, r.text
    return TrainingTrace.model_validate_json(r.text)


def test_trace_lists_root_chain_then_nested_chain_then_plain_calls(proxy):
    sid = proxy.open()["session_id"]
    c = episode(proxy, sid)
    trace = _trace(proxy, sid)
    order = ["root0", "root1", "nested0", "nested1", "plain0", "plain1", "plain2"]
    assert [t.node_id for t in trace.turns] == [c[k]["id"] for k in order]
    assert [t.metadata["call_index"] for t in trace.turns] == [0, 5, 2, 4, 1, 3, 6]
    meta = {t.node_id: t.metadata for t in trace.turns}
    assert meta[c["root1"]["id"]]["extends_call_id"] == c["root0"]["id"]
    assert meta[c["nested1"]["id"]]["extends_call_id"] == c["nested0"]["id"]
    assert meta[c["nested0"]["id"]]["conversation"] == "nested-b" and "conversation" not in meta[c["plain0"]["id"]]


@pytest.mark.parametrize("roles, rows", [("root", 1), ("root+subcall", 2 + 3)])
def test_trl_chains_one_row_per_conversation_with_trained_tokens(make_proxy, roles, rows):
    from trl.experimental.async_grpo.openenv_harness import _chain_to_sequences, _turns_from_training_trace

    proxy = make_proxy(trainable_roles=roles)
    sid = proxy.open()["session_id"]
    c = episode(proxy, sid)
    turns = _turns_from_training_trace(_trace(proxy, sid))
    for threshold in (0, 1024):
        seqs, tally = _chain_to_sequences(turns, "rollout-0", threshold)
        assert len(seqs) == rows, (roles, threshold, tally)
        # The root conversation is one row: its final prompt + completion, both completions trained.
        root = seqs[0]
        r1 = c["root1"]
        assert root.input_ids == r1["prompt"] + r1["ids"]
        assert sum(root.completion_mask) == len(c["root0"]["ids"]) + len(r1["ids"])
        # Within each conversation every transition is clean; forks only where a new conversation starts.
        assert tally["realign"] == 0 and tally["clean"] == 2 and tally["fork"] == 4


def test_arrival_order_without_conversations_would_fork_the_root(make_proxy):
    """Why the trace is reordered: in arrival order TRL starts a new row for root turn 1."""
    from trl.experimental.async_grpo.openenv_harness import _chain_to_sequences, _turns_from_training_trace

    proxy = make_proxy()
    sid = proxy.open()["session_id"]
    episode(proxy, sid)
    trace = _trace(proxy, sid)
    arrival = sorted(trace.turns, key=lambda t: t.metadata["call_index"])
    seqs, _ = _chain_to_sequences(_turns_from_training_trace(TrainingTrace(turns=arrival)), "r", 0)
    assert len(seqs) == 2  # root0 and root1 in separate rows: the whole prompt trained on twice as context


def test_tokenize_passes_through_for_the_base_model_without_a_session(proxy, engine):
    msgs = [{"role": "user", "content": "hi"}]
    r = proxy.http.post("/tokenize", json={"model": "policy", "messages": msgs, "add_generation_prompt": True})
    assert r.status_code == 200 and r.json()["max_model_len"] == 4096
    assert r.json()["tokens"] == [ord(c) % 1000 for c in "<user>hi"]
    assert engine[0].requests[-1]["model"] == "fake-base"
    assert proxy.http.post("/tokenize", content=b"[1]").status_code == 400


def test_overlong_conversation_header_is_400(proxy):
    sid = proxy.open()["session_id"]
    r = proxy.http.post("/v1/completions", json={"model": "policy", "prompt": [1]},
                        headers={"Authorization": f"Bearer {sid}", "X-Fathom-Conversation": "c" * 201})
    assert r.status_code == 400 and "X-Fathom-Conversation" in r.json()["error"]["message"]
