"""The model-call path: authenticate, check budgets, rewrite, call vLLM, capture, validate, answer."""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from fathom.capture_proxy.capture import BadRequest, extract, prepare
from fathom.capture_proxy.http import HTTPFail, error, parse_json, read_json, session_key
from fathom.capture_proxy.sessions import CallRecord, Session
from fathom.capture_proxy.sse import replay
from fathom.capture_proxy.state import ProxyState
from fathom.capture_proxy.upstream import UpstreamError
from fathom.capture_proxy.validation import build_turn
from fathom.protocol import HEADER_CALL_ID, HEADER_CONVERSATION, HEADER_DEPTH, HEADER_PARENT, HEADER_ROLE

PATHS = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}
# Upstream statuses that mean "this request cannot succeed as sent" (e.g. prompt past the context
# length): passed through so the harness stops, instead of a 502 it would retry unchanged.
_CLIENT_ERRORS = (400, 413, 422)


def call_headers(request: Request) -> tuple[str, int, str | None, str | None]:
    headers = request.headers
    role = headers.get(HEADER_ROLE, "root")
    if role not in ("root", "subcall"):
        raise HTTPFail(400, f"{HEADER_ROLE} must be 'root' or 'subcall', got {role!r}", "invalid_header")
    depth_text = headers.get(HEADER_DEPTH)
    if depth_text is None:
        depth = 0 if role == "root" else 1
    elif depth_text.isdigit():
        depth = int(depth_text)
    else:
        raise HTTPFail(400, f"{HEADER_DEPTH} must be a non-negative integer, got {depth_text!r}", "invalid_header")
    conversation = headers.get(HEADER_CONVERSATION) or None
    if conversation is not None and len(conversation) > 200:
        raise HTTPFail(400, f"{HEADER_CONVERSATION} must be at most 200 characters", "invalid_header")
    return role, depth, headers.get(HEADER_PARENT) or None, conversation


def authenticate(state: ProxyState, request: Request) -> Session:
    sid = session_key(request)
    session = state.store.get(sid) if sid else None
    if session is None or session.closed:
        state.metrics.inc("fathom_proxy_rejected_total", reason="session")
        what = "no session id was sent" if not sid else (
            "the session is closed" if session is not None else "the session id is unknown (or evicted)")
        raise HTTPFail(401, f"{what}; open one with POST /sessions and send its id as the API key "
                            "(Authorization: Bearer <id> or x-api-key)", "invalid_session")
    return session


async def handle_call(state: ProxyState, kind: str, request: Request) -> Response:
    t0 = time.perf_counter()
    try:
        session = authenticate(state, request)
        body = await read_json(request, state.cfg.max_body_bytes)
        if not isinstance(body, dict):
            raise HTTPFail(400, "request body must be a JSON object", "invalid_json")
        role, depth, parent, conversation = call_headers(request)
        prep = prepare(kind, body, model=session.model, sampling=session.sampling, trainable=session.trainable)
    except BadRequest as e:
        state.metrics.inc("fathom_proxy_rejected_total", reason="bad_request")
        return error(400, str(e), "invalid_request")
    except HTTPFail as e:
        if e.status != 401:
            state.metrics.inc("fathom_proxy_rejected_total", reason=e.code)
        return e.response()

    session.last_active = state.store.clock()
    flush(state, session)  # budgets count the tokens of every earlier call
    record = CallRecord(session.next_call_id(), len(session.records), role, depth, parent, "pending",
                        conversation=conversation)
    session.records.append(record)
    headers = {HEADER_CALL_ID: record.call_id, "X-Fathom-Policy-Version": str(session.policy_version)}
    # No await between this check and the counting below, so concurrent calls cannot overrun a budget.
    refusal = session.budget_refusal(depth)
    if refusal is not None:
        record.status, record.error = "refused", refusal
        session.refused += 1
        state.metrics.inc("fathom_proxy_calls_total", role=role, status="refused")
        return error(429, refusal + "; the episode should stop", "budget_exceeded", headers)
    session.calls += 1
    session.calls_by_role[role] = session.calls_by_role.get(role, 0) + 1

    t_up = time.perf_counter()
    # The weights' version when the call is sent and when it is answered: under merged sync a sync that lands in
    # between (vLLM paused with in-flight requests kept) makes the turn's tokens come from two policies.
    record.metadata["policy_version_start"] = _version_now(state, session)
    try:
        resp = await state.upstream.post(PATHS[kind], orjson.dumps(prep.body))
    except UpstreamError as e:
        state.upstream_ok = False
        return _failed(state, session, record, e.kind, f"policy server call failed: {e}", headers)
    up_s = time.perf_counter() - t_up
    record.metadata["policy_version"] = _version_now(state, session)
    state.upstream_ok = True
    if resp.status != 200:
        detail = resp.body[:300].decode("utf-8", "replace")
        msg = f"policy server answered HTTP {resp.status}: {detail}"
        status = resp.status if resp.status in _CLIENT_ERRORS else 502
        return _failed(state, session, record, "status", msg, headers, status)
    try:
        data = parse_json(resp.body, "policy server response")
        if not isinstance(data, dict):
            raise HTTPFail(502, "policy server response is not a JSON object", "upstream_protocol")
    except HTTPFail:
        return _failed(state, session, record, "protocol", "policy server response is not JSON", headers)

    record.status = "captured"
    session.pending.append((record, kind, body, data, up_s))
    if prep.stream:
        flush(state, session)  # the SSE replay needs the parsed result anyway; keep arrival order
        payload = replay(kind, data, include_usage=prep.include_usage, client_logprobs=prep.client_logprobs)
        out = Response(payload, media_type="text/event-stream", headers={**headers, "Cache-Control": "no-cache"})
    else:
        # The engine's bytes go back untouched, and capture (extract + validate, ~0.2 ms) runs right
        # after the answer is sent. Every reader of the session calls `flush` first, so nobody can
        # observe a session whose last call is not yet validated and counted.
        out = Response(resp.body, media_type="application/json", headers=headers,
                       background=BackgroundTask(_flush_async, state, session))
    total = time.perf_counter() - t0
    state.upstream_latency.observe(up_s)
    state.overhead.observe(max(total - up_s, 0.0))
    return out


def flush(state: ProxyState, session: Session) -> None:
    """Capture every answered call of `session` not yet captured, in arrival order."""
    while session.pending:
        record, kind, body, data, up_s = session.pending.popleft()
        _capture(state, session, record, kind, body, data, up_s)


async def _flush_async(state: ProxyState, session: Session) -> None:
    flush(state, session)


def _failed(state: ProxyState, session: Session, record: CallRecord, kind: str, msg: str,
            headers: dict[str, str], status: int = 502) -> Response:
    record.status, record.error = "failed", msg
    session.failed += 1
    state.metrics.inc("fathom_proxy_upstream_errors_total", kind=kind)
    state.metrics.inc("fathom_proxy_calls_total", role=record.role, status="failed")
    return error(status, msg, "upstream_" + kind, headers)


def _capture(state: ProxyState, session: Session, record: CallRecord, kind: str,
             body: dict[str, Any], data: dict[str, Any], up_s: float) -> None:
    cap = extract(kind, data)
    session.prompt_tokens += cap.prompt_tokens
    session.completion_tokens += cap.completion_tokens
    state.metrics.inc("fathom_proxy_tokens_total", cap.prompt_tokens, kind="prompt")
    state.metrics.inc("fathom_proxy_tokens_total", cap.completion_tokens, kind="completion")
    role_trainable = session.trainable and record.role in state.trainable_roles
    meta: dict[str, Any] = {
        "call_index": record.index, "role": record.role, "depth": record.depth, "parent_call_id": record.parent,
        "policy_version": record.metadata["policy_version"],
        "policy_version_start": record.metadata["policy_version_start"],
        "model": session.model, "finish_reason": cap.finish_reason,
        "latency_s": round(up_s, 6), "episode_id": session.metadata.get("episode_id"),
        "trainable": role_trainable, "valid": True, "kind": kind,
    }
    if record.chain is not None:
        meta["conversation"] = record.chain
    request = {"temperature": body.get("temperature"), "max_tokens": body.get("max_tokens")}
    response: dict[str, Any] = {"finish_reason": cap.finish_reason}
    if state.cfg.keep_messages:
        request["messages" if kind == "chat" else "prompt"] = body.get("messages" if kind == "chat" else "prompt")
        response["text"] = cap.text
    turn, err = build_turn(record.call_id, cap, trainable=role_trainable, request=request, response=response, metadata=meta)
    record.metadata = meta
    if turn is None:
        meta["valid"] = False
        record.status, record.error = "invalid", err
        record.raw = {"prompt_token_ids": cap.prompt_ids, "completion_token_ids": cap.completion_ids,
                      "per_token_logps": _jsonable(cap.logprobs)}
        session.invalid_turns += 1
        session.flag_reasons.append(f"call {record.call_id} (#{record.index}, {record.role}): {err}")
        state.metrics.inc("fathom_proxy_calls_total", role=record.role, status="invalid")
        return
    record.status, record.turn = "ok", turn
    if record.chain is not None:
        meta.update(_prefix_link(session, record))
        session.last_turn[record.chain] = record
    state.metrics.inc("fathom_proxy_calls_total", role=record.role, status="ok")


def _version_now(state: ProxyState, session: Session) -> int:
    # Under merged sync the weights change in place, so a call records the sync count current when it is sent
    # and when it is answered; under adapter sync the pinned adapter is the version.
    if state.pinner.weight_sync == "merged":
        return state.pinner.merged_version
    return session.policy_version


def _prefix_link(session: Session, record: CallRecord) -> dict[str, Any]:
    """Whether this turn's prompt starts with its conversation's previous turn's prompt + completion ids.

    On a trainable session a turn of a declared conversation (X-Fathom-Conversation) that does not is a bug
    (token in, token out was broken somewhere), so the session is flagged and its trace refused, naming the
    turn. Eval sessions, and root calls that declare no conversation, only record where.
    """
    prev = session.last_turn.get(record.chain or "")
    if prev is None:
        return {}
    prompt_ids = record.turn.prompt_token_ids
    before = prev.turn.prompt_token_ids + prev.turn.completion_token_ids
    if prompt_ids[: len(before)] == before:
        return {"extends_call_id": prev.call_id}
    n = min(len(before), len(prompt_ids))
    at = next((i for i in range(n) if prompt_ids[i] != before[i]), n)
    if session.trainable and record.conversation is not None:
        session.flag_reasons.append(
            f"call {record.call_id} (#{record.index}, {record.role}, conversation {record.conversation}) does not "
            f"extend call {prev.call_id}: its prompt differs from that turn's prompt + completion ids at token {at}; "
            "every turn of a conversation must be sent as the previous prompt + completion ids + new tokens")
    return {"extends_call_id": None, "diverges_from_call_id": prev.call_id, "divergence_index": at}


def _jsonable(values: Any) -> Any:
    if isinstance(values, list):
        return [v if not isinstance(v, float) or v == v and abs(v) != float("inf") else str(v) for v in values]
    return values
