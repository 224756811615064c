"""Clients of the env server. Never imports the server.

`RLMEnv` is an OpenEnv `EnvClient` (WebSocket session, step by step):

    with RLMEnv(base_url="http://127.0.0.1:8200").sync() as env:
        r = env.reset(task_id="needle-32k-s1000000")
        r = env.step(RLMAction(code="print(len(context))"))

`EpisodeClient` drives whole episodes run by the server against a capture-proxy session
(`POST /episodes`, `GET` and `DELETE /episodes/{id}`), which is how training rollouts run.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from fathom.env_server.models import RLMAction, RLMObservation, RLMState
from fathom.config.security import shared_token
from fathom.protocol import EpisodeRequest, EpisodeResult, token_headers


class RLMEnv(EnvClient[RLMAction, RLMObservation, RLMState]):
    def _step_payload(self, action: RLMAction) -> dict[str, Any]:
        return action.model_dump(exclude_none=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[RLMObservation]:
        obs = dict(payload.get("observation") or {})
        obs["done"], obs["reward"] = payload.get("done", False), payload.get("reward")
        return StepResult(observation=RLMObservation.model_validate(obs), reward=payload.get("reward"),
                          done=payload.get("done", False), metadata=payload.get("metadata"))

    def _parse_state(self, payload: dict[str, Any]) -> RLMState:
        return RLMState.model_validate(payload)


class EpisodeError(RuntimeError):
    """The env server refused an episode request; the message carries its status and reason."""


class EpisodeClient:
    """`token`: the shared token, sent as `X-Fathom-Token`; None reads `$FATHOM_SHARED_TOKEN` (unset: no token)."""

    def __init__(self, base_url: str, timeout_s: float = 60.0, token: str | None = None):
        self.base_url = base_url.rstrip("/")
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout_s,
                                 headers=token_headers(token or shared_token()))

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "EpisodeClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, req: EpisodeRequest) -> EpisodeResult:
        r = self.http.post("/episodes", json=req.model_dump(mode="json", exclude_none=True))
        if r.status_code != 202:
            raise EpisodeError(f"POST /episodes answered {r.status_code}: {r.text[:500]}")
        return EpisodeResult.model_validate(r.json())

    def get(self, episode_id: str, wait_s: float = 0.0) -> EpisodeResult:
        r = self.http.get(f"/episodes/{episode_id}", params={"wait_s": wait_s}, timeout=wait_s + 60)
        if r.status_code != 200:
            raise EpisodeError(f"GET /episodes/{episode_id} answered {r.status_code}: {r.text[:500]}")
        return EpisodeResult.model_validate(r.json())

    def cancel(self, episode_id: str) -> EpisodeResult:
        """End a pending or running episode now (unscorable, stop reason `cancelled`); a finished one is unchanged."""
        r = self.http.delete(f"/episodes/{episode_id}")
        if r.status_code != 200:
            raise EpisodeError(f"DELETE /episodes/{episode_id} answered {r.status_code}: {r.text[:500]}")
        return EpisodeResult.model_validate(r.json())

    def wait(self, episode_id: str, timeout_s: float = 3600.0) -> EpisodeResult:
        """Long-poll until the episode is done or errored (or `timeout_s` passes; then the last status)."""
        deadline = time.monotonic() + timeout_s
        while True:
            res = self.get(episode_id, wait_s=max(min(30.0, deadline - time.monotonic()), 0.0))
            if res.status in ("done", "error") or time.monotonic() >= deadline:
                return res

    def run(self, req: EpisodeRequest, timeout_s: float = 3600.0) -> EpisodeResult:
        return self.wait(self.start(req).episode_id, timeout_s)
