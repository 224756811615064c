"""One real sandbox pool (zygote + layers) shared by the sandbox tests of a session.

It requires the layers the shipped configs require: all of them under
FATHOM_REQUIRE_SANDBOX_LAYERS=1 (CI, `make test`), so a missing one fails the run; otherwise
those available here (tests/sandbox_layers.py).
"""

from __future__ import annotations

import pytest

from fathom.config.sandbox import SandboxConfig
from fathom.env_server.sandbox import SandboxPool, detect_layers
from tests.sandbox_layers import required, shipped_required_layers


@pytest.fixture(scope="session")
def pool():
    shipped = shipped_required_layers()
    detected = detect_layers()
    layers = shipped if required() else [n for n in shipped if detected[n]["available"]]
    # A short deadline keeps the killed-payload tests quick; real runs use 10 s.
    cfg = SandboxConfig(call_timeout_s=2.0, memory_limit_mb=512, episode_cpu_s=60, required_layers=layers)
    with SandboxPool(cfg) as p:
        yield p


@pytest.fixture
def ep(pool):
    e = pool.new_episode("The quick brown fox. " * 10, llm_handler=lambda ps: [f"echo:{p}" for p in ps])
    yield e
    e.close()
