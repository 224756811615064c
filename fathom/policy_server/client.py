"""Small HTTP client for the policy server: health, models, server info, adapters, chat."""

from __future__ import annotations

from typing import Any

import httpx


class PolicyClientError(RuntimeError):
    """The policy server refused a request; the message carries its status and body."""


class PolicyClient:
    def __init__(self, base_url: str, timeout: float = 120.0):
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "PolicyClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check(self, r: httpx.Response, what: str) -> httpx.Response:
        if r.status_code >= 400:
            raise PolicyClientError(f"{what} failed: HTTP {r.status_code} from {self.base_url}: {r.text[:500]}")
        return r

    def health(self) -> bool:
        try:
            return self._http.get("/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def models(self) -> list[dict[str, Any]]:
        """Served models: the base (`parent` None) and each loaded LoRA adapter (`parent` = base name)."""
        return self._check(self._http.get("/v1/models"), "GET /v1/models").json()["data"]

    def server_info(self) -> dict[str, Any]:
        """vLLM's resolved engine config (a dev-mode route: policy_server.dev_mode on, or merged sync)."""
        return self._check(self._http.get("/server_info"), "GET /server_info").json()

    def load_adapter(self, name: str, path: str) -> None:
        body = {"lora_name": name, "lora_path": str(path)}
        self._check(self._http.post("/v1/load_lora_adapter", json=body), f"loading adapter {name!r} from {path}")

    def unload_adapter(self, name: str) -> None:
        self._check(self._http.post("/v1/unload_lora_adapter", json={"lora_name": name}), f"unloading adapter {name!r}")

    def chat(self, model: str, messages: list[dict[str, str]], **params: Any) -> dict[str, Any]:
        """One non-streaming chat completion asking for token ids and logprobs."""
        body = {"model": model, "messages": messages, "logprobs": True, "return_token_ids": True, **params}
        return self._check(self._http.post("/v1/chat/completions", json=body), "chat completion").json()
