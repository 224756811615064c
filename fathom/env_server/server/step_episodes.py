"""Episodes driven step by step through OpenEnv, and the store that keeps HTTP-started ones by id."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from fathom.env_server.server.errors import Conflict, NotFound, Unavailable
from fathom.env_server.server.harness import Current, Harness
from fathom.protocol import RewardComponents


@dataclass
class StepEpisode:
    episode_id: str
    task: Any
    sandbox: Any
    harness: Harness
    cur: Current
    max_turns: int
    turn: int = 0
    done: bool = False
    stop_reason: str | None = None
    answer: str | None = None
    components: RewardComponents | None = None
    llm_calls: int = 0
    last_used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def close(self) -> None:
        self.cur.cancel_pending()
        self.sandbox.close()

    def close_soon(self) -> None:
        """Close from the event loop without blocking it on the sandbox's IPC."""
        self.cur.cancel_pending()
        self.harness.executor.submit(self.sandbox.close)


class StepStore:
    """Episodes started over stateless HTTP `/reset`, by id; idle ones are closed, finished ones kept a while."""

    def __init__(self, capacity: int, idle_s: float, retention_s: float):
        self.capacity, self.idle_s, self.retention_s = capacity, idle_s, retention_s
        self.episodes: dict[str, StepEpisode] = {}

    def purge(self) -> None:
        now = time.monotonic()
        for k, ep in list(self.episodes.items()):
            limit = self.retention_s if ep.done else self.idle_s
            if now - ep.last_used > limit:
                ep.close_soon()
                del self.episodes[k]

    def put(self, ep: StepEpisode) -> None:
        self.purge()
        live = sum(1 for e in self.episodes.values() if not e.done)
        if live >= self.capacity:
            ep.close_soon()
            raise Unavailable(f"{live} HTTP episodes are running (env_server.max_concurrent_envs); retry later")
        if ep.episode_id in self.episodes:
            ep.close_soon()
            raise Conflict(f"episode id {ep.episode_id!r} already exists; reset with a new episode_id")
        self.episodes[ep.episode_id] = ep

    def get(self, episode_id: str) -> StepEpisode:
        ep = self.episodes.get(episode_id)
        if ep is None:
            raise NotFound(f"unknown episode id {episode_id!r}; start one with /reset")
        return ep

    def close(self) -> None:
        for ep in self.episodes.values():
            ep.close()
        self.episodes.clear()
