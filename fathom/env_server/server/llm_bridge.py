"""Model calls through the capture proxy: root turns, and `llm()` from the sandbox bridged to the host.

The env server never imports the proxy; it speaks its HTTP API. Every call carries the
session id (Authorization and x-api-key) and the role/depth/parent headers, and the proxy
answers with the call id that sub-calls send back as their parent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from fathom.protocol import (
    HEADER_API_KEY,
    HEADER_CALL_ID,
    HEADER_CONVERSATION,
    HEADER_DEPTH,
    HEADER_PARENT,
    HEADER_ROLE,
    PUBLIC_MODEL_NAME,
    Sampling,
    SessionCreate,
    SessionInfo,
)


class ProxyError(Exception):
    """A model call that did not produce a reply.

    kind: `unreachable` (connection failure, timeout, 5xx: the episode is unscorable),
    `refused` (429, a proxy budget), `too_long` (the prompt outgrew the model's context),
    `rejected` (any other 4xx).
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass
class ChatReply:
    text: str
    call_id: str | None
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float
    prompt_ids: list[int] | None = None
    """Token path only: the prompt ids the engine saw, and the completion ids it sampled."""
    completion_ids: list[int] | None = None


def _sampling_body(sampling: Sampling | None) -> dict[str, Any]:
    if sampling is None:
        return {}
    body = sampling.model_dump()
    if body.get("top_k") == -1:  # -1 is vLLM's "off"; leave it out so any OpenAI server accepts the body
        body.pop("top_k")
    return body


class ProxyClient:
    """One episode's view of the capture proxy: its base URL and session."""

    def __init__(self, http: httpx.AsyncClient, base_url: str, session_id: str, timeout_s: float):
        self.http = http
        self.base_url = base_url.rstrip("/")
        self.session_id = session_id
        self.timeout_s = timeout_s
        self._cap: int | None = None

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.session_id}", HEADER_API_KEY: self.session_id}

    def _headers(self, role: str, depth: int, parent: str | None, conversation: str | None) -> dict[str, str]:
        headers = self._auth() | {HEADER_ROLE: role, HEADER_DEPTH: str(depth)}
        if parent:
            headers[HEADER_PARENT] = parent
        if conversation:
            headers[HEADER_CONVERSATION] = conversation
        return headers

    async def _post(self, path: str, body: dict[str, Any], headers: dict[str, str],
                    timeout_s: float | None) -> tuple[dict[str, Any], str | None, float]:
        t0 = time.perf_counter()
        try:
            r = await self.http.post(
                f"{self.base_url}{path}", json=body, headers=headers,
                timeout=min(self.timeout_s, timeout_s) if timeout_s else self.timeout_s,
            )
        except httpx.TimeoutException as e:
            raise ProxyError("unreachable", f"capture proxy at {self.base_url} timed out: {e!r}") from e
        except httpx.HTTPError as e:
            raise ProxyError("unreachable", f"capture proxy at {self.base_url} unreachable: {e!r}") from e
        latency = (time.perf_counter() - t0) * 1000
        if r.status_code != 200:
            raise _status_error(r, self.base_url)
        try:
            data = r.json()
        except ValueError as e:
            raise ProxyError("unreachable", f"capture proxy at {self.base_url} sent a malformed reply: {e!r}") from e
        return data, r.headers.get(HEADER_CALL_ID), latency

    async def chat(
        self,
        messages: list[dict[str, str]],
        *,
        role: str,
        depth: int,
        parent: str | None,
        sampling: Sampling | None,
        timeout_s: float | None = None,
        conversation: str | None = None,
    ) -> ChatReply:
        """One chat-text call (the path for API-only servers): the engine renders and tokenizes."""
        body = {"model": PUBLIC_MODEL_NAME, "messages": messages} | _sampling_body(sampling)
        data, call_id, latency = await self._post("/v1/chat/completions", body,
                                                  self._headers(role, depth, parent, conversation), timeout_s)
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
            usage = data.get("usage") or {}
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise ProxyError("unreachable", f"capture proxy at {self.base_url} sent a malformed reply: {e!r}") from e
        return ChatReply(
            text=text,
            call_id=call_id,
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            latency_ms=latency,
        )

    async def complete(
        self,
        prompt_ids: list[int],
        *,
        role: str,
        depth: int,
        parent: str | None,
        sampling: Sampling | None,
        timeout_s: float | None = None,
        conversation: str | None = None,
    ) -> ChatReply:
        """One token-in, token-out call: `/v1/completions` with a token-id prompt; the sampled ids come back."""
        body = {"model": PUBLIC_MODEL_NAME, "prompt": prompt_ids, "return_token_ids": True} | _sampling_body(sampling)
        data, call_id, latency = await self._post("/v1/completions", body,
                                                  self._headers(role, depth, parent, conversation), timeout_s)
        try:
            choice = data["choices"][0]
            ids = choice["token_ids"]
            if not isinstance(ids, list) or not all(type(i) is int for i in ids):
                raise TypeError(f"token_ids is not a list of ints: {str(ids)[:80]}")
            usage = data.get("usage") or {}
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise ProxyError("unreachable", f"capture proxy at {self.base_url} sent no completion token ids "
                                            f"(does the engine support return_token_ids?): {e!r}") from e
        return ChatReply(
            text=choice.get("text") or "",
            call_id=call_id,
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=int(usage.get("prompt_tokens") or len(prompt_ids)),
            completion_tokens=int(usage.get("completion_tokens") or len(ids)),
            latency_ms=latency,
            prompt_ids=prompt_ids,
            completion_ids=ids,
        )

    async def tokenize_chat(self, messages: list[dict[str, str]]) -> tuple[list[int], int]:
        """The engine's own rendering of `messages` (generation prompt on) and its max_model_len, via the proxy."""
        body = {"model": PUBLIC_MODEL_NAME, "messages": messages, "add_generation_prompt": True}
        data, _, _ = await self._post("/tokenize", body, {}, None)  # no session needed (nor known at start-up)
        try:
            return list(data["tokens"]), int(data["max_model_len"])
        except (KeyError, TypeError, ValueError) as e:
            raise ProxyError("unreachable", f"capture proxy at {self.base_url} sent a malformed /tokenize reply "
                                            f"({e!r}); is the policy server vLLM?") from e

    async def output_cap(self) -> int:
        """The session's per-call output cap (its sampling's max_tokens), read once."""
        if self._cap is None:
            info = await self.session_info()
            self._cap = int(info.sampling.get("max_tokens") or Sampling().max_tokens)
        return self._cap

    async def session_info(self) -> SessionInfo:
        try:
            r = await self.http.get(f"{self.base_url}/sessions/{self.session_id}", timeout=self.timeout_s)
        except httpx.HTTPError as e:
            raise ProxyError("unreachable", f"capture proxy at {self.base_url} unreachable: {e!r}") from e
        if r.status_code != 200:
            raise _status_error(r, self.base_url)
        return SessionInfo.model_validate(r.json())

    @classmethod
    async def open(
        cls, http: httpx.AsyncClient, base_url: str, create: SessionCreate, timeout_s: float
    ) -> "ProxyClient":
        """Open a new capture session (used when an episode request names none)."""
        base = base_url.rstrip("/")
        try:
            r = await http.post(f"{base}/sessions", json=create.model_dump(mode="json"), timeout=timeout_s)
        except httpx.HTTPError as e:
            raise ProxyError("unreachable", f"capture proxy at {base} unreachable: {e!r}") from e
        if not r.is_success:
            raise _status_error(r, base)
        info = SessionInfo.model_validate(r.json())
        return cls(http, base, info.session_id, timeout_s)


def _status_error(r: httpx.Response, base_url: str) -> ProxyError:
    detail = r.text[:500]
    if r.status_code == 429:
        return ProxyError("refused", f"capture proxy refused the call (budget): {detail}")
    if r.status_code >= 500:
        return ProxyError("unreachable", f"capture proxy at {base_url} failed with {r.status_code}: {detail}")
    low = detail.lower()
    if r.status_code == 400 and ("context length" in low or "maximum" in low or "too long" in low):
        return ProxyError("too_long", f"the prompt no longer fits the model's context: {detail}")
    return ProxyError("rejected", f"capture proxy rejected the call with {r.status_code}: {detail}")
