"""Replaying a complete (non-streaming) upstream result to a client that asked for `stream: true`.

Capture is always non-streaming: one complete response carries ids and logprobs whole, while
reassembling them from deltas is where captures silently go wrong. A client that asked for SSE
and got a JSON body would parse nothing, so the finished result is re-sent as chunks.
"""

from __future__ import annotations

from typing import Any

import orjson


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def replay(kind: str, resp: dict[str, Any], *, include_usage: bool, client_logprobs: bool) -> bytes:
    """All SSE events for `resp`, as one byte string (the result is already complete)."""
    base = {"id": resp.get("id", ""), "created": resp.get("created", 0), "model": resp.get("model", "")}
    events: list[bytes] = []
    choices = resp.get("choices") or []
    if kind == "chat":
        base["object"] = "chat.completion.chunk"
        for ch in choices:
            msg = ch.get("message") or {}
            idx = ch.get("index", 0)
            events.append(_event({**base, "choices": [{"index": idx, "delta": {"role": "assistant", "content": ""}}]}))
            delta: dict[str, Any] = {}
            if msg.get("content"):
                delta["content"] = msg["content"]
            if msg.get("reasoning"):
                delta["reasoning"] = msg["reasoning"]
            if msg.get("tool_calls"):
                delta["tool_calls"] = [{"index": i, **tc} for i, tc in enumerate(msg["tool_calls"])]
            if delta:
                chunk = {"index": idx, "delta": delta}
                if client_logprobs and ch.get("logprobs"):
                    chunk["logprobs"] = ch["logprobs"]
                events.append(_event({**base, "choices": [chunk]}))
            events.append(_event({**base, "choices": [{"index": idx, "delta": {}, "finish_reason": ch.get("finish_reason")}]}))
    else:
        base["object"] = "text_completion"
        for ch in choices:
            chunk = {"index": ch.get("index", 0), "text": ch.get("text", ""), "finish_reason": ch.get("finish_reason")}
            if client_logprobs and ch.get("logprobs"):
                chunk["logprobs"] = ch["logprobs"]
            events.append(_event({**base, "choices": [chunk]}))
    if include_usage and resp.get("usage"):
        events.append(_event({**base, "choices": [], "usage": resp["usage"]}))
    events.append(DONE)
    return b"".join(events)
