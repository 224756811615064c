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

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.session_id}", HEADER_API_KEY: self.session_id}

    async def chat(
        self,
        messages: list[dict[str, str]],
        *,
        role: str,
        depth: int,
        parent: str | None,
        sampling: Sampling | None,
        timeout_s: float | None = None,
    ) -> ChatReply:
        headers = self._auth() | {HEADER_ROLE: role, HEADER_DEPTH: str(depth)}
        if parent:
            headers[HEADER_PARENT] = parent
        body = {"model": PUBLIC_MODEL_NAME, "messages": messages} | _sampling_body(sampling)
        t0 = time.perf_counter()
        try:
            r = await self.http.post(
                f"{self.base_url}/v1/chat/completions",
                json=body,
                headers=headers,
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
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
            usage = data.get("usage") or {}
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            raise ProxyError("unreachable", f"capture proxy at {self.base_url} sent a malformed reply: {e!r}") from e
        return ChatReply(
            text=text,
            call_id=r.headers.get(HEADER_CALL_ID),
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            latency_ms=latency,
        )

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
