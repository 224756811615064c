"""The one HTTP client of the capture proxy's API. Never imports the proxy's server side.

- `ProxyClient` (blocking): health, open and close a session, read a session's trace. The rollout worker and
  evaluation use it from their threads.
- `ProxySession` (asyncio): one episode's view of its session, for the env server's harness: model calls
  (chat text or token ids) with the role/depth/parent headers, `/tokenize`, the session's output cap.

Every failure is a `ProxyCallError`: `kind` says what a caller can do about it, `status`, `code` and `detail` carry
what the proxy answered (None when it did not answer). A session id travels as `Authorization: Bearer` and as
`x-api-key` (a hosting proxy may strip the first); the shared token, when set, as `X-Fathom-Token`.

`client_core.py` holds what needs only httpx: the error, what an answer means, and the trainer's one call
(`report_policy_version`, POST /policy/version).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from fathom.capture_proxy.client_core import ProxyCallError, reaching, status_error
from fathom.config.security import shared_token
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
    token_headers,
)


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


def auth_headers(session_id: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {session_id}", HEADER_API_KEY: session_id}


def _checked(r: httpx.Response, base_url: str) -> httpx.Response:
    if not r.is_success:
        raise status_error(r, base_url)
    return r


def _session_info(r: httpx.Response, base_url: str) -> SessionInfo:
    return SessionInfo.model_validate(_checked(r, base_url).json())


class ProxyClient:
    """The capture proxy at `base_url`, from a thread. `token`: the shared token; None reads
    `$FATHOM_SHARED_TOKEN` (unset: no token). httpx clients are thread-safe, so threads share one."""

    def __init__(self, base_url: str, *, timeout_s: float = 60.0, token: str | None = None,
                 limits: httpx.Limits | None = None):
        self.base_url = base_url.rstrip("/")
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout_s,
                                 headers=token_headers(token or shared_token()),
                                 **({"limits": limits} if limits is not None else {}))

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "ProxyClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def health(self, timeout_s: float = 10.0) -> None:
        """Return when the proxy answers `/healthz` with success; raise ProxyCallError otherwise."""
        with reaching(self.base_url):
            _checked(self.http.get("/healthz", timeout=timeout_s), self.base_url)

    def open_session(self, create: SessionCreate) -> SessionInfo:
        with reaching(self.base_url):
            return _session_info(self.http.post("/sessions", json=create.model_dump(mode="json")), self.base_url)

    def session_info(self, session_id: str) -> SessionInfo:
        with reaching(self.base_url):
            return _session_info(self.http.get(f"/sessions/{session_id}"), self.base_url)

    def close_session(self, session_id: str) -> None:
        """Close a session. Only a transport failure raises: an answer (even 404, already closed) means it is gone."""
        with reaching(self.base_url):
            self.http.delete(f"/sessions/{session_id}")

    def trace(self, session_id: str) -> Any:
        """The session's OpenEnv `TrainingTrace`. A trace the proxy refuses raises ProxyCallError with its code
        (`invalid_capture`: a turn failed validation)."""
        from openenv.core.harness import TrainingTrace  # OpenEnv pulls in gradio: only the trace readers pay for it

        with reaching(self.base_url):
            r = self.http.get(f"/sessions/{session_id}/trace")
        if r.status_code != 200:
            raise status_error(r, self.base_url)
        return TrainingTrace.model_validate_json(r.content)


def _sampling_body(sampling: Sampling | None) -> dict[str, Any]:
    if sampling is None:
        return {}
    body = sampling.model_dump()
    if body.get("top_k") == -1:  # -1 is vLLM's "off"; leave it out so any OpenAI server accepts the body
        body.pop("top_k")
    return body


class ProxySession:
    """One episode's view of the capture proxy: its base URL and session, on an asyncio client."""

    def __init__(self, http: httpx.AsyncClient, base_url: str, session_id: str, timeout_s: float):
        self.http = http
        self.base_url = base_url.rstrip("/")
        self.session_id = session_id
        self.timeout_s = timeout_s
        self._cap: int | None = None

    def _headers(self, role: str, depth: int, parent: str | None, conversation: str | None) -> dict[str, str]:
        headers = auth_headers(self.session_id) | {HEADER_ROLE: role, HEADER_DEPTH: str(depth)}
        if parent:
            headers[HEADER_PARENT] = parent
        if conversation:
            headers[HEADER_CONVERSATION] = conversation
        return headers

    def _malformed(self, what: str) -> ProxyCallError:
        return ProxyCallError("unreachable", f"capture proxy at {self.base_url} sent {what}")

    async def _post(self, path: str, body: dict[str, Any], headers: dict[str, str],
                    timeout_s: float | None) -> tuple[dict[str, Any], str | None, float]:
        t0 = time.perf_counter()
        with reaching(self.base_url):
            r = await self.http.post(f"{self.base_url}{path}", json=body, headers=headers,
                                     timeout=min(self.timeout_s, timeout_s) if timeout_s else self.timeout_s)
        latency = (time.perf_counter() - t0) * 1000
        if r.status_code != 200:
            raise status_error(r, self.base_url)
        try:
            data = r.json()
        except ValueError as e:
            raise self._malformed(f"a malformed reply: {e!r}") from e
        return data, r.headers.get(HEADER_CALL_ID), latency

    async def chat(self, messages: list[dict[str, str]], *, role: str, depth: int, parent: str | None,
                   sampling: Sampling | None, timeout_s: float | None = None,
                   conversation: str | None = None) -> ChatReply:
        """One chat-text call (the path for API-only servers): the engine renders and tokenizes."""
        body = {"model": PUBLIC_MODEL_NAME, "messages": messages} | _sampling_body(sampling)
        data, call_id, latency = await self._post("/v1/chat/completions", body,
                                                  self._headers(role, depth, parent, conversation), timeout_s)
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
            usage = data.get("usage") or {}
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise self._malformed(f"a malformed reply: {e!r}") from e
        return ChatReply(text=text, call_id=call_id, finish_reason=choice.get("finish_reason"),
                         prompt_tokens=int(usage.get("prompt_tokens") or 0),
                         completion_tokens=int(usage.get("completion_tokens") or 0), latency_ms=latency)

    async def complete(self, prompt_ids: list[int], *, role: str, depth: int, parent: str | None,
                       sampling: Sampling | None, timeout_s: float | None = None,
                       conversation: str | None = None) -> ChatReply:
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
            raise self._malformed(f"no completion token ids (does the engine support return_token_ids?): {e!r}") from e
        return ChatReply(text=choice.get("text") or "", call_id=call_id, finish_reason=choice.get("finish_reason"),
                         prompt_tokens=int(usage.get("prompt_tokens") or len(prompt_ids)),
                         completion_tokens=int(usage.get("completion_tokens") or len(ids)), latency_ms=latency,
                         prompt_ids=prompt_ids, completion_ids=ids)

    async def tokenize_chat(self, messages: list[dict[str, str]]) -> tuple[list[int], int]:
        """The engine's own rendering of `messages` (generation prompt on) and its max_model_len, via the proxy."""
        body = {"model": PUBLIC_MODEL_NAME, "messages": messages, "add_generation_prompt": True}
        data, _, _ = await self._post("/tokenize", body, {}, None)  # no session needed (nor known at start-up)
        try:
            return list(data["tokens"]), int(data["max_model_len"])
        except (KeyError, TypeError, ValueError) as e:
            raise self._malformed(f"a malformed /tokenize reply ({e!r}); is the policy server vLLM?") from e

    async def output_cap(self) -> int:
        """The session's per-call output cap (its sampling's max_tokens), read once."""
        if self._cap is None:
            info = await self.session_info()
            self._cap = int(info.sampling.get("max_tokens") or Sampling().max_tokens)
        return self._cap

    async def session_info(self) -> SessionInfo:
        with reaching(self.base_url):
            r = await self.http.get(f"{self.base_url}/sessions/{self.session_id}", timeout=self.timeout_s)
        return _session_info(r, self.base_url)

    @classmethod
    async def open(cls, http: httpx.AsyncClient, base_url: str, create: SessionCreate,
                   timeout_s: float) -> "ProxySession":
        """Open a new capture session (used when an episode request names none)."""
        base = base_url.rstrip("/")
        with reaching(base):
            r = await http.post(f"{base}/sessions", json=create.model_dump(mode="json"), timeout=timeout_s)
        return cls(http, base, _session_info(r, base).session_id, timeout_s)
