"""Which sandbox layers the tests must have, and what a missing one means.

`FATHOM_REQUIRE_SANDBOX_LAYERS=1` (set by `.ci/run` and `make test`) is the switch: under it, the
test pool requires the layers the shipped configs require, and a test that needs a missing layer
fails instead of skipping, so CI cannot pass on a host where `configs/smoke.toml` refuses to start.
Without it (a laptop without bubblewrap, say), such tests skip and say why.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fathom.config import load_config

SWITCH = "FATHOM_REQUIRE_SANDBOX_LAYERS"
CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def required() -> bool:
    return os.environ.get(SWITCH) == "1"


def shipped_required_layers() -> list[str]:
    """The union of `sandbox.required_layers` over the shipped configs (configs/*.toml)."""
    layers: list[str] = []
    for path in sorted(CONFIGS.glob("*.toml")):
        for name in load_config(path).sandbox.required_layers:
            if name not in layers:
                layers.append(name)
    return layers


def need(detected: dict, *names: str) -> None:
    """Skip, or under the switch fail, unless every layer in `names` is available here."""
    missing = [n for n in names if not detected[n]["available"]]
    if not missing:
        return
    why = f"layer(s) {missing} not available here: {[detected[n]['detail'] for n in missing]}"
    if required():
        pytest.fail(f"{why}; {SWITCH}=1 requires them (install bubblewrap and libseccomp2: `make setup`)")
    pytest.skip(why)
