"""Test tiers by folder: tests/unit -> unit, tests/integration -> integration (slow is explicit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fathom.unwind import sigterm_unwinds

ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath)).resolve()
        parts = path.relative_to(ROOT).parts if path.is_relative_to(ROOT) else ()
        if "unit" in parts:
            item.add_marker(pytest.mark.unit)
        elif "integration" in parts:
            item.add_marker(pytest.mark.integration)


def pytest_configure(config: pytest.Config) -> None:
    # A CI runner or `timeout` stops pytest with SIGTERM: unwind like Ctrl-C, so session fixtures stop their servers.
    sigterm_unwinds()
