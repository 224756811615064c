"""Settings of the OpenEnv env server and its episode runner (owned by the env_server component)."""

from __future__ import annotations

from fathom.config.base import FathomModel


class EnvServerConfig(FathomModel):
    host: str = "127.0.0.1"
    """Interface the env server binds to."""

    port: int = 8200
    """Port of the env server."""

    max_concurrent_envs: int = 64
    """Concurrent OpenEnv sessions and episodes the server accepts."""

    max_turns: int = 8
    """Root turns per episode before it stops with reason `max_turns`."""

    max_depth: int = 2
    """Deepest `llm()` recursion: 2 in training, 4 at demo time."""
