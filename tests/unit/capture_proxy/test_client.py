"""The capture proxy's HTTP client against an in-process fake proxy (httpx.MockTransport): what it sends, what it
makes of each answer, and the ProxyCallError kind and fields a caller sees for each failure."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from fathom.capture_proxy.client import ProxyClient, ProxyCallError, ProxySession
from fathom.protocol import Sampling, SessionCreate

INFO = {"session_id": "s1", "policy_version": 4, "model": "trl-policy-v4", "trainable": True,
        "sampling": {"max_tokens": 77}}
TURN = {"node_id": "c1", "prompt_token_ids": [1, 2], "completion_token_ids": [3], "per_token_logps": [-0.5],
        "loss_mask": [0, 0, 1], "metadata": {"role": "root"}}


def sync_client(handler, token: str | None = None) -> ProxyClient:
    c = ProxyClient("http://proxy/", token=token)
    c.http = httpx.Client(base_url=c.base_url, headers=c.http.headers, transport=httpx.MockTransport(handler))
    return c


def answer(status: int, body: dict | str):
    def handle(req: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body) if isinstance(body, dict) else httpx.Response(status, text=body)
    return handle


def refuse(req: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=req)


def test_open_session_posts_the_spec_with_the_shared_token_and_returns_its_info(monkeypatch):
    monkeypatch.delenv("FATHOM_SHARED_TOKEN", raising=False)
    seen: list[httpx.Request] = []

    def handle(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(201, json=INFO)

    info = sync_client(handle, token="tok").open_session(SessionCreate(sampling=Sampling(max_tokens=77),
                                                                       metadata={"task_id": "t"}))
    assert (info.session_id, info.policy_version, info.model) == ("s1", 4, "trl-policy-v4")
    (req,) = seen
    assert (req.method, req.url.path, req.headers["X-Fathom-Token"]) == ("POST", "/sessions", "tok")
    body = json.loads(req.content)
    assert body["trainable"] and body["sampling"]["max_tokens"] == 77 and body["metadata"] == {"task_id": "t"}


@pytest.mark.parametrize("status,body,kind,code,detail", [
    (404, {"error": {"code": "unknown_model", "message": "no adapter x"}}, "rejected", "unknown_model", "no adapter x"),
    (429, {"error": {"code": "budget", "message": "too many calls"}}, "refused", "budget", "too many calls"),
    (503, "upstream down", "unreachable", None, "upstream down"),
])
def test_a_refused_open_names_status_code_and_detail(status, body, kind, code, detail):
    with pytest.raises(ProxyCallError) as err:
        sync_client(answer(status, body)).open_session(SessionCreate())
    e = err.value
    assert (e.kind, e.status, e.code, e.detail) == (kind, status, code, detail)
    assert (e.body if isinstance(body, str) else json.loads(e.body)) == body


def test_no_answer_is_unreachable_and_names_the_proxy():
    with pytest.raises(ProxyCallError, match="capture proxy at http://proxy unreachable") as err:
        sync_client(refuse).open_session(SessionCreate())
    assert err.value.kind == "unreachable" and err.value.status is None
    with pytest.raises(ProxyCallError, match="unreachable"):
        sync_client(refuse).health()
    with pytest.raises(ProxyCallError, match="unreachable"):
        sync_client(refuse).close_session("s1")


def test_health_checks_healthz_and_a_failing_one_raises():
    paths: list[str] = []

    def handle(req: httpx.Request) -> httpx.Response:
        paths.append(req.url.path)
        return httpx.Response(200, json={"ok": True})

    sync_client(handle).health()
    assert paths == ["/healthz"]
    with pytest.raises(ProxyCallError, match="failed with 503"):
        sync_client(answer(503, "starting")).health()


def test_close_session_deletes_it_and_an_already_closed_one_is_no_error():
    seen: list[tuple[str, str]] = []

    def handle(req: httpx.Request) -> httpx.Response:
        seen.append((req.method, req.url.path))
        return httpx.Response(404, json={"error": {"code": "unknown_session", "message": "gone"}})

    sync_client(handle).close_session("s1")
    assert seen == [("DELETE", "/sessions/s1")]


def test_trace_validates_the_training_trace_and_keeps_the_refusal_code():
    trace = sync_client(answer(200, {"schema_version": 1, "turns": [TURN]})).trace("s1")
    assert [t.node_id for t in trace.turns] == ["c1"] and trace.turns[0].completion_token_ids == [3]
    refusal = {"error": {"code": "invalid_capture", "message": "call c7: ids and logprobs differ"}}
    with pytest.raises(ProxyCallError) as err:
        sync_client(answer(409, refusal)).trace("s1")
    assert (err.value.status, err.value.code, err.value.detail) == (409, "invalid_capture",
                                                                    "call c7: ids and logprobs differ")


def run(coro):
    return asyncio.run(coro)


def session(handler) -> ProxySession:
    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return ProxySession(http, "http://proxy/", "s1", 30)


def test_a_model_call_carries_the_session_and_tree_headers_and_returns_the_sampled_ids():
    seen: list[httpx.Request] = []

    def handle(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(200, headers={"X-Fathom-Call-Id": "c9"}, json={
            "choices": [{"text": "hi", "token_ids": [5, 6], "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2}})

    reply = run(session(handle).complete([1, 2, 3], role="subcall", depth=1, parent="c1", conversation="k",
                                         sampling=Sampling(top_k=-1)))
    assert (reply.text, reply.call_id, reply.completion_ids, reply.prompt_ids) == ("hi", "c9", [5, 6], [1, 2, 3])
    (req,) = seen
    h = req.headers
    assert (h["authorization"], h["x-api-key"], h["x-fathom-role"], h["x-fathom-depth"], h["x-fathom-parent"],
            h["x-fathom-conversation"]) == ("Bearer s1", "s1", "subcall", "1", "c1", "k")
    body = json.loads(req.content)
    assert body["prompt"] == [1, 2, 3] and body["return_token_ids"] and "top_k" not in body


def test_chat_reads_the_message_and_usage():
    reply = run(session(answer(200, {"choices": [{"message": {"content": "ok"}, "finish_reason": "length"}],
                                     "usage": {"prompt_tokens": 7, "completion_tokens": 1}}))
                .chat([{"role": "user", "content": "q"}], role="root", depth=0, parent=None, sampling=None))
    assert (reply.text, reply.finish_reason, reply.prompt_tokens, reply.completion_tokens) == ("ok", "length", 7, 1)


@pytest.mark.parametrize("status,body,kind", [
    (429, {"error": {"message": "budget"}}, "refused"),
    (400, {"error": {"message": "maximum context length is 2048"}}, "too_long"),
    (400, {"error": {"message": "bad header"}}, "rejected"),
    (500, "boom", "unreachable"),
    (200, {"choices": [{"text": "x", "token_ids": "5 6"}]}, "unreachable"),
])
def test_each_failed_model_call_has_the_kind_the_harness_acts_on(status, body, kind):
    with pytest.raises(ProxyCallError) as err:
        run(session(answer(status, body)).complete([1], role="root", depth=0, parent=None, sampling=None))
    assert err.value.kind == kind


def test_output_cap_and_tokenize_read_the_proxy():
    s = session(lambda req: httpx.Response(200, json=INFO) if req.method == "GET" else
                httpx.Response(200, json={"tokens": [1, 2], "max_model_len": 2048}))
    assert run(s.output_cap()) == 77
    assert run(s.tokenize_chat([{"role": "user", "content": "q"}])) == ([1, 2], 2048)
    with pytest.raises(ProxyCallError, match="malformed /tokenize reply"):
        run(session(answer(200, {"tokens": [1]})).tokenize_chat([]))


def test_open_starts_a_session_bound_to_its_id():
    http = httpx.AsyncClient(transport=httpx.MockTransport(answer(201, INFO)))
    s = run(ProxySession.open(http, "http://proxy/", SessionCreate(trainable=False), 30))
    assert (s.session_id, s.base_url) == ("s1", "http://proxy")


def test_the_policy_version_report_posts_the_version_and_names_it_when_refused():
    from fathom.capture_proxy.client_core import report_policy_version

    seen: list[httpx.Request] = []

    def handle(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(200, json={"merged_version": 5})

    http = httpx.Client(headers={"X-Fathom-Token": "tok"}, transport=httpx.MockTransport(handle))
    report_policy_version(http, "http://proxy/", 5)
    (req,) = seen
    assert (req.method, str(req.url), req.headers["X-Fathom-Token"]) == ("POST", "http://proxy/policy/version", "tok")
    assert json.loads(req.content) == {"version": 5}

    refused = {"error": {"code": "version_regressed", "message": "policy version 2 is older than the reported 3; versions only move forward"}}
    http = httpx.Client(transport=httpx.MockTransport(answer(409, refused)))
    with pytest.raises(ProxyCallError, match=r"reporting policy version 2 to http://proxy/policy/version: .*409") as e:
        report_policy_version(http, "http://proxy", 2)
    assert (e.value.kind, e.value.status, e.value.code, e.value.no_answer) == ("rejected", 409, "version_regressed", False)
    assert "older than the reported 3" in e.value.detail

    with pytest.raises(ProxyCallError) as e:
        report_policy_version(httpx.Client(transport=httpx.MockTransport(refuse)), "http://proxy", 2)
    assert e.value.kind == "unreachable" and e.value.status is None and e.value.no_answer


def test_the_merged_policy_version_is_read_from_get_policy_and_a_refusal_says_so():
    from fathom.capture_proxy.client_core import merged_policy_version

    def client(handler) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(handler))

    assert merged_policy_version(client(answer(200, {"weight_sync": "merged", "merged_version": 7})), "http://p/") == 7
    assert merged_policy_version(client(answer(200, {"merged_version": None})), "http://p") == 0
    with pytest.raises(ProxyCallError, match=r"reading the policy version at http://p/policy: .*401") as e:
        merged_policy_version(client(answer(401, {"error": {"code": "unauthorized", "message": "token"}})), "http://p")
    assert e.value.status == 401
    with pytest.raises(ProxyCallError, match="malformed /policy answer"):
        merged_policy_version(client(answer(200, "not json")), "http://p")
