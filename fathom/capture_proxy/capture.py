"""Rewriting a client request for capture, and reading the captured tokens back out.

Every upstream request asks vLLM for prompt token ids, completion token ids and the sampled
tokens' logprobs (`return_token_ids`, `logprobs`), is non-streaming, names the session's
pinned model, and carries the session's sampling. Trainable sessions sample from the plain
temperature-scaled policy (top_p 1, no top-k/min-p, no penalties, no logit constraints), so the
recorded logprobs are the ones the trainer recomputes. Nothing here tokenizes text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson

from fathom.capture_proxy.errors import InvalidRequest
from fathom.protocol import PUBLIC_MODEL_NAME


class BadRequest(ValueError):
    """A client request the proxy refuses before any upstream call; the message names the field."""


NEUTRAL_SAMPLING: dict[str, Any] = {
    "top_p": 1.0,
    "top_k": 0,  # vLLM's "disabled"
    "min_p": 0.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
}

# Fields that reshape the logits beyond temperature; a trainer cannot reproduce them.
CONSTRAINING_FIELDS = (
    "logit_bias", "allowed_token_ids", "bad_words", "structured_outputs", "guided_json", "guided_regex",
    "guided_choice", "guided_grammar", "min_tokens", "logits_processors",
)

# Fields the proxy owns on the upstream request; whatever the client sent is replaced.
_OWNED = ("stream", "stream_options", "n", "max_completion_tokens", "return_token_ids", "prompt_logprobs", "echo")


@dataclass(slots=True)
class Prepared:
    body: dict[str, Any]
    stream: bool
    include_usage: bool
    client_logprobs: bool


def _positive_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise BadRequest(f"{key} must be a positive integer, got {value!r}; omit it to use the session's output cap")
    return value


def prepare(kind: str, body: dict[str, Any], *, model: str, sampling: dict[str, Any], trainable: bool) -> Prepared:
    """Validate and rewrite a `/v1/chat/completions` (kind chat) or `/v1/completions` body in place."""
    name = body.get("model", PUBLIC_MODEL_NAME)
    if name != PUBLIC_MODEL_NAME:
        raise BadRequest(f"model must be {PUBLIC_MODEL_NAME!r} (the proxy pins the version per session), got {name!r}")
    n = body.get("n", 1)
    if n != 1 or isinstance(n, bool):
        raise BadRequest(f"n must be 1 (one completion per captured call), got {n!r}")
    if body.get("use_beam_search"):
        raise BadRequest("use_beam_search is not supported: beam search has no per-token sampling logprobs")
    if kind == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list of chat messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise BadRequest(f"messages[{i}] must be an object with a string role "
                                 '(e.g. {"role": "user", "content": "..."})')
    else:
        prompt = body.get("prompt")
        single_ids = isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt)
        if not (isinstance(prompt, str) or single_ids):
            raise BadRequest("prompt must be one string or one list of token ids (batched prompts are not captured)")
        if body.get("echo"):
            raise BadRequest("echo is not supported by the capture proxy")
    cap = int(sampling["max_tokens"])
    asked = [v for v in (_positive_int(body, "max_tokens"), _positive_int(body, "max_completion_tokens")) if v]
    if trainable:
        constrained = [k for k in CONSTRAINING_FIELDS if body.get(k)]
        rf = body.get("response_format")
        if isinstance(rf, dict) and rf.get("type", "text") != "text":
            constrained.append("response_format")
        if constrained:
            raise BadRequest(
                "a trainable session samples the unconstrained policy, so these fields are refused: "
                + ", ".join(constrained) + "; drop them or open the session with trainable=false"
            )
    stream = bool(body.get("stream"))
    opts = body.get("stream_options")
    include_usage = bool(stream and isinstance(opts, dict) and opts.get("include_usage"))
    client_logprobs = bool(body.get("logprobs"))
    for key in _OWNED:
        body.pop(key, None)
    body["model"] = model
    body["max_tokens"] = min([cap, *asked])
    body["return_token_ids"] = True
    if kind == "chat":
        body["logprobs"] = True
        body.setdefault("top_logprobs", 0)
    else:
        # Completions take an int: how many alternatives besides the sampled token (0 = just it).
        top = body.get("logprobs")
        body["logprobs"] = top if isinstance(top, int) and not isinstance(top, bool) and top > 0 else 0
    # The session decides sampling; trainable sessions additionally get the neutral knobs.
    for key in ("temperature", *NEUTRAL_SAMPLING):
        if key in sampling:
            body[key] = sampling[key]
    if trainable:
        body.update(NEUTRAL_SAMPLING)
    return Prepared(body, stream, include_usage, client_logprobs)


@dataclass(slots=True)
class Captured:
    prompt_ids: Any
    completion_ids: Any
    logprobs: Any
    finish_reason: Any
    prompt_tokens: int
    completion_tokens: int
    text: Any


def extract(kind: str, resp: dict[str, Any]) -> Captured:
    """Pull ids, logprobs and usage out of a vLLM response without judging them (validation does that)."""
    choices = resp.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    lp = choice.get("logprobs")
    if kind == "chat":
        prompt_ids = resp.get("prompt_token_ids")
        content = lp.get("content") if isinstance(lp, dict) else None
        logprobs = [c.get("logprob") if isinstance(c, dict) else c for c in content] if isinstance(content, list) else None
        message = choice.get("message") or {}
        text = message.get("content") if isinstance(message, dict) else None
    else:
        prompt_ids = choice.get("prompt_token_ids")
        logprobs = lp.get("token_logprobs") if isinstance(lp, dict) else None
        text = choice.get("text")
    completion_ids = choice.get("token_ids")
    usage = resp.get("usage") if isinstance(resp.get("usage"), dict) else {}
    n_prompt = usage.get("prompt_tokens")
    n_completion = usage.get("completion_tokens")
    if not isinstance(n_prompt, int):
        n_prompt = len(prompt_ids) if isinstance(prompt_ids, list) else 0
    if not isinstance(n_completion, int):
        n_completion = len(completion_ids) if isinstance(completion_ids, list) else 0
    return Captured(prompt_ids, completion_ids, logprobs, choice.get("finish_reason"), n_prompt, n_completion, text)


def parse_json(raw: bytes, what: str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        # The stdlib parser also reads NaN/Infinity, which a broken engine may emit; validation
        # must see those values to flag the turn rather than fail to parse it.
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidRequest(f"{what} is not valid JSON ({e}); send a JSON object", "invalid_json") from None
