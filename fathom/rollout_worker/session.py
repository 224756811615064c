"""OpenEnv sessions over our stack, for TRL's HarnessRolloutWorker in loop-owning mode.

One rollout = one trainable capture-proxy session (pinned to the newest policy version) plus one
env-server episode run against it. The env server owns the loop and the reward; the proxy owns the
tokens. The worker waits for the episode, reads the proxy's `TrainingTrace`, and forwards the env
server's reward from `verify()` (None when unscorable, never 0).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import httpx
from openenv.core.harness import ResourceSession, ResourceSessionFactory, ToolResult, TrainingTrace, VerifyResult

from fathom.env_server.client import EpisodeClient
from fathom.protocol import EpisodeLimits, EpisodeRequest, EpisodeResult, Sampling, SessionCreate

log = logging.getLogger(__name__)

# verify() and TRL's rollout reward function run back to back on the same pool thread
# (_HarnessRolloutLoop._run_session); this hands the episode result from one to the other.
_last_verified = threading.local()


class InvalidCaptureError(ValueError):
    """The proxy refused the trace because a turn failed validation. A ValueError on purpose: TRL turns it into
    a CaptureContractError, which stops training instead of scoring the rollout."""


class RolloutError(RuntimeError):
    """The proxy or env server failed this rollout; TRL scores it unscorable and goes on."""


def task_id_of(task: Any) -> str:
    """The task id in a dataset prompt: a plain id, or chat messages whose last content is the id."""
    if isinstance(task, str) and task:
        return task
    if isinstance(task, list) and task and isinstance(task[-1], dict) and isinstance(task[-1].get("content"), str):
        return task[-1]["content"]
    raise ValueError(f"dataset prompt {task!r} holds no task id; use a task id string or "
                     "[{'role': 'user', 'content': TASK_ID}] (see fathom.trainer.dataset)")


def last_verified() -> EpisodeResult | None:
    """The episode result the last verify() on this thread returned a reward for."""
    return getattr(_last_verified, "result", None)


class FathomSession(ResourceSession):
    """An OpenEnv ResourceSession that is also a TrainableSession (wait_for_completion, fetch_training_trace)."""

    def __init__(self, factory: "FathomSessionFactory", *, session_id: str, episode_id: str, task_id: str,
                 policy_version: int):
        self.factory, self.session_id, self.episode_id, self.task_id = factory, session_id, episode_id, task_id
        self.policy_version = policy_version
        self.result: EpisodeResult | None = None
        self.closed = False

    # --- ResourceSession: the env server runs the loop, so there are no tools to call here ---------------
    def initial_messages(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.task_id}]

    def list_tools(self) -> list:
        return []

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(error=f"tool {name!r}: the env server's RLM harness owns the loop; there are no tools here")

    # --- TrainableSession -----------------------------------------------------------------------------
    def wait_for_completion(self, timeout_s: float | None = None) -> int:
        """0 when the episode finished, 1 when it errored; TimeoutError when it is still running at the deadline."""
        timeout = timeout_s if timeout_s is not None else self.factory.timeout_s
        try:
            res = self.factory.episodes.wait(self.episode_id, timeout_s=timeout)
        except Exception as e:  # noqa: BLE001 - transport or server failure: the rollout is unscorable
            raise RolloutError(f"episode {self.episode_id}: cannot read its result from the env server: {e}") from e
        self.result = res
        if res.status not in ("done", "error"):
            raise TimeoutError(f"episode {self.episode_id} still {res.status} after {timeout:g} s")
        return 0 if res.status == "done" else 1

    def fetch_training_trace(self) -> TrainingTrace:
        r = self.factory.proxy.get(f"/sessions/{self.session_id}/trace")
        if r.status_code == 409 and _code(r) == "invalid_capture":
            raise InvalidCaptureError(
                f"capture of session {self.session_id} (episode {self.episode_id}, task {self.task_id}) is invalid, "
                f"training stops: {_message(r)}")
        if r.status_code != 200:
            raise RolloutError(f"GET /sessions/{self.session_id}/trace answered {r.status_code}: {r.text[:300]}")
        trace = TrainingTrace.model_validate_json(r.content)
        # Only trainable (root) turns go to TRL: a zero-masked sub-call between two root turns has a different
        # prompt, so TRL's chaining would fork the conversation into one row per root turn.
        keep = [t for t in trace.turns if t.metadata.get("trainable", any(t.loss_mask))]
        return TrainingTrace(schema_version=1, turns=keep)

    def verify(self, transcript: list[dict[str, Any]], final_state: Any | None = None) -> VerifyResult:
        res = self.result
        if res is None or res.status not in ("done", "error"):
            res = self.factory.episodes.get(self.episode_id)
            self.result = res
        _last_verified.result = res
        scorable = res.status == "done" and res.reward is not None
        metrics = episode_metrics(res)
        return VerifyResult(env_reward=float(res.reward) if scorable else None, done=True, metrics=metrics,
                            artifacts={"episode_id": res.episode_id, "session_id": self.session_id})

    def close(self) -> None:
        """Close the proxy session. A still-running episode's next model call is then refused, which ends it."""
        if self.closed:
            return
        self.closed = True
        try:
            self.factory.proxy.delete(f"/sessions/{self.session_id}")
        except httpx.HTTPError as e:
            log.warning("closing proxy session %s failed: %s", self.session_id, e)


def episode_metrics(res: EpisodeResult) -> dict[str, Any]:
    """Per-episode numbers the trainer logs: reward components, turns, sub-calls, stop reason."""
    subcalls = sum(len(t.subcalls) for t in res.turns)
    out: dict[str, Any] = {"turns": len(res.turns), "subcalls": subcalls, "llm_calls": res.llm_calls,
                           "total_tokens": res.total_tokens, "stop_reason": res.stop_reason, "status": res.status,
                           "wall_s": res.wall_s, "unscorable": res.status != "done" or res.reward is None}
    if res.reward_components is not None:
        c = res.reward_components
        out.update({f"reward/{k}": float(getattr(c, k)) for k in
                    ("correctness", "format", "token_budget", "recursion", "tool_bonus", "total")})
        out["reward/correct"] = float(c.correct)
    return out


class FathomSessionFactory(ResourceSessionFactory[FathomSession]):
    """Opens a trainable proxy session, then starts an env episode with the worker's episode id.

    TRL calls the class with `sampling=` (its training policy, validated by OpenEnv's `training_sampling`), so pass
    it as `functools.partial(FathomSessionFactory, proxy_url=..., env_url=..., ...)`: a partial pickles into the
    spawned rollout child, where the HTTP clients are built.
    """

    def __init__(self, *, proxy_url: str, env_url: str, max_tokens: int, max_turns: int, timeout_s: float = 900.0,
                 sampling: dict[str, Any] | None = None, metadata: dict[str, Any] | None = None,
                 on_failure: Any = None):
        self.proxy_url, self.env_url = proxy_url.rstrip("/"), env_url.rstrip("/")
        temperature = float((sampling or {}).get("temperature", 1.0))
        self.sampling = Sampling(temperature=temperature, max_tokens=max_tokens)
        self.limits = EpisodeLimits(max_turns=max_turns)
        self.timeout_s = timeout_s
        self.metadata = dict(metadata or {})
        self.on_failure = on_failure
        self.proxy = httpx.Client(base_url=self.proxy_url, timeout=60.0)
        self.episodes = EpisodeClient(self.env_url, timeout_s=60.0)

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> FathomSession:
        task_id = task_id_of(task)
        episode_id = episode_id or f"ep-{time.time_ns():x}"
        meta = {**self.metadata, "episode_id": episode_id, "task_id": task_id, "group": seed}
        try:
            r = self.proxy.post("/sessions", json=SessionCreate(trainable=True, sampling=self.sampling,
                                                                metadata=meta).model_dump(mode="json"))
            if r.status_code != 201:
                raise RolloutError(f"POST /sessions on the capture proxy answered {r.status_code}: {r.text[:300]}")
            info = r.json()
            session = FathomSession(self, session_id=info["session_id"], episode_id=episode_id, task_id=task_id,
                                    policy_version=int(info["policy_version"]))
            try:
                self.episodes.start(EpisodeRequest(episode_id=episode_id, task_id=task_id,
                                                   session_id=session.session_id, proxy_url=self.proxy_url,
                                                   limits=self.limits, sampling=self.sampling, metadata=meta))
            except Exception:
                session.close()
                raise
        except Exception as e:
            if self.on_failure is not None:
                self.on_failure(episode_id=episode_id, task_id=task_id, group=seed, error=str(e))
            raise
        return session


def _code(r: httpx.Response) -> str | None:
    try:
        return (r.json().get("error") or {}).get("code")
    except (ValueError, AttributeError):
        return None


def _message(r: httpx.Response) -> str:
    try:
        return str((r.json().get("error") or {}).get("message") or r.text)
    except (ValueError, AttributeError):
        return r.text[:500]


__all__ = ["FathomSession", "FathomSessionFactory", "InvalidCaptureError", "RolloutError", "episode_metrics",
           "last_verified", "task_id_of"]
