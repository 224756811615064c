"""What goes upstream (pinned model and sampling, capture fields) and what is recorded per call."""

from __future__ import annotations

from openenv.core.harness.training import TrainingTrace

USER = [{"role": "user", "content": "hello"}]


def test_upstream_request_is_rewritten_for_capture(proxy, engine):
    fake, _ = engine
    sid = proxy.open(sampling={"temperature": 0.6, "max_tokens": 64})["session_id"]
    r = proxy.chat(sid, USER, temperature=1.5, top_p=0.5, top_k=3, presence_penalty=1.0, max_tokens=1000, stream=False)
    assert r.status_code == 200
    sent = fake.requests[-1]
    assert sent["model"] == "fake-base"
    assert sent["temperature"] == 0.6
    assert (sent["top_p"], sent["top_k"], sent["min_p"]) == (1.0, 0, 0.0)
    assert (sent["presence_penalty"], sent["frequency_penalty"], sent["repetition_penalty"]) == (0.0, 0.0, 1.0)
    assert sent["max_tokens"] == 64
    assert sent["logprobs"] is True and sent["return_token_ids"] is True and "stream" not in sent


def test_client_may_ask_for_a_smaller_output_cap(proxy, engine):
    sid = proxy.open(sampling={"max_tokens": 64})["session_id"]
    proxy.chat(sid, USER, max_completion_tokens=8)
    assert engine[0].requests[-1]["max_tokens"] == 8


def test_trainable_session_refuses_logit_constraints(proxy, engine):
    sid = proxy.open()["session_id"]
    r = proxy.chat(sid, USER, logit_bias={"5": 10})
    assert r.status_code == 400 and "logit_bias" in r.json()["error"]["message"]
    assert engine[0].requests == []


def test_eval_session_uses_its_own_sampling(proxy, engine):
    sid = proxy.open(trainable=False, sampling={"temperature": 0.3, "top_p": 0.8, "top_k": 5})["session_id"]
    proxy.chat(sid, USER)
    sent = engine[0].requests[-1]
    assert (sent["temperature"], sent["top_p"], sent["top_k"]) == (0.3, 0.8, 5)


def test_completions_endpoint_is_captured(proxy, engine):
    sid = proxy.open()["session_id"]
    r = proxy.http.post("/v1/completions", json={"model": "policy", "prompt": "abc"},
                        headers={"Authorization": f"Bearer {sid}"})
    assert r.status_code == 200
    assert engine[0].requests[-1]["logprobs"] == 0
    (turn,) = TrainingTrace.model_validate_json(proxy.http.get(f"/sessions/{sid}/trace").text).turns
    assert turn.prompt_token_ids == [97, 98, 99] and turn.metadata["finish_reason"] == "length"


def _trace(proxy, sid):
    return TrainingTrace.model_validate_json(proxy.http.get(f"/sessions/{sid}/trace").text)


def test_subcalls_recorded_with_depth_and_parent_and_not_trained_by_default(proxy):
    sid = proxy.open()["session_id"]
    root = proxy.chat(sid, USER).headers["X-Fathom-Call-Id"]
    sub = proxy.chat(sid, [{"role": "user", "content": "piece"}],
                     headers={"X-Fathom-Role": "subcall", "X-Fathom-Depth": "1", "X-Fathom-Parent": root})
    subsub = proxy.chat(sid, [{"role": "user", "content": "bit"}],
                        headers={"X-Fathom-Role": "subcall", "X-Fathom-Depth": "2",
                                 "X-Fathom-Parent": sub.headers["X-Fathom-Call-Id"]})
    turns = {t.node_id: t for t in _trace(proxy, sid).turns}
    assert len(turns) == 3
    s1, s2 = turns[sub.headers["X-Fathom-Call-Id"]], turns[subsub.headers["X-Fathom-Call-Id"]]
    assert (s1.metadata["role"], s1.metadata["depth"], s1.metadata["parent_call_id"]) == ("subcall", 1, root)
    assert (s2.metadata["depth"], s2.metadata["parent_call_id"]) == (2, sub.headers["X-Fathom-Call-Id"])
    # Own rows, not spliced into the root conversation; zero-masked under trainable_roles = root.
    assert s1.prompt_token_ids[0] == ord("<") and sum(s1.loss_mask) == 0 and sum(s2.loss_mask) == 0
    assert sum(turns[root].loss_mask) == 4


def test_trainable_roles_root_plus_subcall(make_proxy):
    proxy = make_proxy(trainable_roles="root+subcall")
    sid = proxy.open()["session_id"]
    proxy.chat(sid, USER, headers={"X-Fathom-Role": "subcall", "X-Fathom-Depth": "1"})
    (turn,) = _trace(proxy, sid).turns
    assert sum(turn.loss_mask) == 4 and turn.metadata["trainable"] is True


def _calls(proxy, sid):
    return proxy.http.get(f"/sessions/{sid}/calls").json()["calls"]


def test_eval_session_records_where_a_root_turn_diverges(proxy):
    sid = proxy.open(trainable=False)["session_id"]
    msgs = [{"role": "user", "content": "a"}]
    first = proxy.chat(sid, msgs)
    msgs += [{"role": "assistant", "content": first.json()["choices"][0]["message"]["content"]},
             {"role": "user", "content": "b"}]
    # The fake renders the assistant text, not its token ids, so the prefix diverges at the completion.
    proxy.chat(sid, msgs)
    c1, c2 = _calls(proxy, sid)
    m2 = c2["metadata"]
    assert m2["extends_call_id"] is None and m2["diverges_from_call_id"] == c1["call_id"]
    assert m2["divergence_index"] == len(c1["turn"]["prompt_token_ids"])
    assert c2["conversation"] is None and m2["conversation"] == "root"  # undeclared: the default root chain
    assert not proxy.http.get(f"/sessions/{sid}").json()["flagged"]  # chat text on an eval session: only recorded


def test_trainable_turn_that_does_not_extend_its_conversation_flags_the_session(proxy):
    sid = proxy.open()["session_id"]
    conv = {"X-Fathom-Conversation": "root-1"}
    msgs = [{"role": "user", "content": "a"}]
    first = proxy.chat(sid, msgs, headers=conv)
    proxy.chat(sid, [{"role": "user", "content": "other"}])  # undeclared root calls are linked, never flagged
    assert not proxy.http.get(f"/sessions/{sid}").json()["flagged"]
    msgs += [{"role": "assistant", "content": first.json()["choices"][0]["message"]["content"]},
             {"role": "user", "content": "b"}]
    second = proxy.chat(sid, msgs, headers=conv).headers["X-Fathom-Call-Id"]
    r = proxy.http.get(f"/sessions/{sid}/trace")
    assert r.status_code == 409
    msg = r.json()["error"]["message"]
    assert second in msg and "does not extend" in msg and first.headers["X-Fathom-Call-Id"] in msg
    info = proxy.http.get(f"/sessions/{sid}").json()
    assert info["flagged"] and len(info["flag_reasons"]) == 1


def test_root_turn_extending_the_previous_turn_is_linked(proxy):
    sid = proxy.open()["session_id"]
    auth = {"Authorization": f"Bearer {sid}"}
    first = proxy.http.post("/v1/completions", json={"model": "policy", "prompt": [1, 2, 3]}, headers=auth).json()
    follow = [1, 2, 3, *first["choices"][0]["token_ids"], 7, 8]
    proxy.http.post("/v1/completions", json={"model": "policy", "prompt": follow}, headers=auth)
    t1, t2 = _trace(proxy, sid).turns
    assert t2.metadata["extends_call_id"] == t1.node_id
    assert t2.prompt_token_ids[: len(t1.prompt_token_ids) + 4] == t1.prompt_token_ids + t1.completion_token_ids
