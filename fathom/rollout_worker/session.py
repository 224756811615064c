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

from fathom.capture_proxy.client import ProxyClient, ProxyCallError
from fathom.config.security import shared_token
from fathom.env_server.client import EpisodeClient
from fathom.protocol import EpisodeLimits, EpisodeRequest, EpisodeResult, Sampling, SessionCreate
from fathom.rollout_worker.balance import LeastInFlight
from fathom.rollout_worker.record import RolloutRecord

log = logging.getLogger(__name__)

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


def env_reward(res: EpisodeResult) -> float | None:
    """The reward the env server computed for the episode; None when it is unscorable (never 0)."""
    return float(res.reward) if res.status == "done" and res.reward is not None else None


def policy_versions(turns: list[Any]) -> tuple[int, int] | None:
    """(oldest, newest) weights version that sampled any of these captured turns, from the proxy's per-call
    `policy_version_start` (sent) and `policy_version` (answered); None when no turn carries a version.

    Under merged sync the weights change under a running episode: a sync between two turns, or during one, gives
    oldest < newest, and then the episode's tokens do not all come from one policy."""
    lo = hi = None
    for t in turns:
        end = t.metadata.get("policy_version")
        if end is None:
            continue
        start = t.metadata.get("policy_version_start", end)
        lo = start if lo is None else min(lo, start)
        hi = end if hi is None else max(hi, end)
    return None if lo is None else (int(lo), int(hi))


class FathomSession(ResourceSession):
    """An OpenEnv ResourceSession that is also a TrainableSession (wait_for_completion, fetch_training_trace)."""

    def __init__(self, factory: "FathomSessionFactory", *, session_id: str, episode_id: str, task_id: str,
                 policy_version: int, record: RolloutRecord | None = None):
        self.factory, self.session_id, self.episode_id, self.task_id = factory, session_id, episode_id, task_id
        self.policy_version = policy_version
        self.record = record if record is not None else RolloutRecord(task_id)
        """The rollout's own record: its episode id, the trace's policy versions and the verified result go there
        for the loop (`groups.py`)."""
        self.record.episode_id = episode_id
        self.result: EpisodeResult | None = None
        self.closed = False
        self.env_index = 0
        """Which of the factory's env servers runs the episode."""
        self._in_flight = False
        self._lock = threading.Lock()
        """`close()` runs on TRL's stopping thread while the rollout's own thread may be finishing the episode."""

    @property
    def env(self) -> EpisodeClient:
        return self.factory.env_clients[self.env_index]

    def _started_on(self, index: int) -> None:
        self.env_index, self._in_flight = index, True

    def _finished(self) -> None:
        """The episode no longer loads its env server (done, errored or abandoned): free its slot, once."""
        with self._lock:
            if not self._in_flight:
                return
            self._in_flight = False
        self.factory.balancer.release(self.env_index)

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
            res = self.env.wait(self.episode_id, timeout_s=timeout)
        except Exception as e:  # transport or server failure: the rollout is unscorable
            raise RolloutError(f"episode {self.episode_id}: cannot read its result from the env server: {e}") from e
        self.result = res
        if res.status in ("done", "error"):
            self._finished()
        else:
            self.record.timed_out = True
            raise TimeoutError(f"episode {self.episode_id} still {res.status} after {timeout:g} s")
        return 0 if res.status == "done" else 1

    def fetch_training_trace(self) -> TrainingTrace:
        try:
            trace = self.factory.proxy.trace(self.session_id)
        except ProxyCallError as e:
            if e.status == 409 and e.code == "invalid_capture":
                raise InvalidCaptureError(
                    f"capture of session {self.session_id} (episode {self.episode_id}, task {self.task_id}) is "
                    f"invalid, training stops: {e.detail}") from e
            raise RolloutError(_answered(f"GET /sessions/{self.session_id}/trace", e)) from e
        # Only trainable turns go to TRL (root turns, and sub-calls under trainable_roles = root+subcall): a dropped
        # zero-masked sub-call makes no row of its own. The proxy's trace keeps each conversation's turns adjacent
        # (root conversation first), so TRL's chaining makes one row per conversation.
        keep = [t for t in trace.turns if t.metadata.get("trainable", any(t.loss_mask))]
        self.record.policy_versions = policy_versions(keep)
        return TrainingTrace(schema_version=1, turns=keep)

    def verify(self, transcript: list[dict[str, Any]], final_state: Any | None = None) -> VerifyResult:
        res = self.result
        if res is None or res.status not in ("done", "error"):
            res = self.env.get(self.episode_id)
            self.result = res
        self.record.result = res
        return VerifyResult(env_reward=env_reward(res), done=True, metrics=episode_metrics(res),
                            artifacts={"episode_id": res.episode_id, "session_id": self.session_id})

    def close(self) -> None:
        """Cancel the episode if it is still running, then close the proxy session.

        TRL closes every live session when the rollout worker stops (and `_run_session` closes each one it ends,
        including one whose wait timed out). Without the cancel, a running episode would go on to its next model
        call, which the closed session refuses: a full generation later, while TRL's stop waits for it."""
        if self.closed:
            return
        self.closed = True
        if self._in_flight:
            try:
                self.env.cancel(self.episode_id)
            except Exception as e:  # noqa: BLE001 - the proxy session still closes, which ends the episode later
                log.warning("cancelling episode %s on %s failed: %s", self.episode_id, self.env.base_url, e)
        self._finished()
        try:
            self.factory.proxy.close_session(self.session_id)
        except ProxyCallError as e:
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

    def __init__(self, *, proxy_url: str, env_url: str | list[str], max_tokens: int, max_turns: int,
                 timeout_s: float = 900.0, sampling: dict[str, Any] | None = None,
                 metadata: dict[str, Any] | None = None, on_failure: Any = None, token: str | None = None):
        urls = [env_url] if isinstance(env_url, str) else list(env_url)
        if not urls:
            raise ValueError("env_url is an empty list; give at least one env server root URL")
        self.proxy_url = proxy_url.rstrip("/")
        self.env_urls = [u.rstrip("/") for u in urls]
        self.env_url = self.env_urls[0]
        temperature = float((sampling or {}).get("temperature", 1.0))
        self.sampling = Sampling(temperature=temperature, max_tokens=max_tokens)
        self.limits = EpisodeLimits(max_turns=max_turns)
        self.timeout_s = timeout_s
        self.metadata = dict(metadata or {})
        self.on_failure = on_failure
        token = token or shared_token()
        self.proxy = ProxyClient(self.proxy_url, timeout_s=60.0, token=token)
        self.env_clients = [EpisodeClient(u, timeout_s=60.0, token=token) for u in self.env_urls]
        self.balancer = LeastInFlight(len(self.env_clients))

    @property
    def episodes(self) -> EpisodeClient:
        """The first env server's client (the only one with a single URL)."""
        return self.env_clients[0]

    def _start_episode(self, req: EpisodeRequest) -> int:
        """Start the episode on the least-loaded env server; an unreachable one is skipped for the next."""
        errors: list[str] = []
        tried: set[int] = set()
        while (index := self.balancer.acquire(tried)) is not None:
            tried.add(index)
            try:
                self.env_clients[index].start(req)
                return index
            except httpx.TransportError as e:
                self.balancer.release(index)
                errors.append(f"{self.env_urls[index]}: {e!r}")
                log.warning("env server %s unreachable for episode %s, trying the next: %s", self.env_urls[index],
                            req.episode_id, e)
            except Exception:
                self.balancer.release(index)
                raise
        raise RolloutError(f"episode {req.episode_id}: no env server took it: {'; '.join(errors)}")

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> FathomSession:
        """`task`: a dataset prompt, or the `RolloutRecord` that holds it (what FATHOM's rollout loop passes)."""
        record = task if isinstance(task, RolloutRecord) else None
        task_id = task_id_of(record.prompt if record is not None else task)
        episode_id = episode_id or f"ep-{time.time_ns():x}"
        meta = {**self.metadata, "episode_id": episode_id, "task_id": task_id, "group": seed}
        try:
            try:
                info = self.proxy.open_session(SessionCreate(trainable=True, sampling=self.sampling, metadata=meta))
            except ProxyCallError as e:
                raise RolloutError(_answered("POST /sessions on the capture proxy", e)) from e
            session = FathomSession(self, session_id=info.session_id, episode_id=episode_id, task_id=task_id,
                                    policy_version=int(info.policy_version), record=record)
            try:
                session._started_on(self._start_episode(EpisodeRequest(
                    episode_id=episode_id, task_id=task_id, session_id=session.session_id, proxy_url=self.proxy_url,
                    limits=self.limits, sampling=self.sampling, metadata=meta)))
            except Exception:
                session.close()
                raise
        except Exception as e:
            if self.on_failure is not None:
                self.on_failure(episode_id=episode_id, task_id=task_id, group=seed, error=str(e))
            raise
        return session


def _answered(request: str, e: ProxyCallError) -> str:
    """What a RolloutError says: the proxy's status and answer, or why no answer came."""
    return f"{request} answered {e.status}: {e.body[:300]}" if e.status is not None else str(e)


__all__ = ["FathomSession", "FathomSessionFactory", "InvalidCaptureError", "RolloutError", "episode_metrics",
           "env_reward", "task_id_of"]
