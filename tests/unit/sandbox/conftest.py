"""One real sandbox pool (zygote + layers) shared by the sandbox tests of a session."""

from __future__ import annotations

import pytest

from fathom.config.sandbox import SandboxConfig
from fathom.env_server.sandbox import SandboxPool


@pytest.fixture(scope="session")
def pool():
    # A short deadline keeps the killed-payload tests quick; real runs use 10 s.
    with SandboxPool(SandboxConfig(call_timeout_s=2.0, memory_limit_mb=512, episode_cpu_s=60)) as p:
        yield p


@pytest.fixture
def ep(pool):
    e = pool.new_episode("The quick brown fox. " * 10, llm_handler=lambda ps: [f"echo:{p}" for p in ps])
    yield e
    e.close()
