"""fathom.tasks imports only protocol and config from fathom (STYLE.md's table)."""

from __future__ import annotations

import ast
from pathlib import Path

import fathom.tasks

ALLOWED = ("fathom.tasks", "fathom.protocol", "fathom.config")


def test_tasks_imports_only_protocol_and_config() -> None:
    root = Path(fathom.tasks.__file__).parent
    bad = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            bad += [f"{path.name}: {n}" for n in names if n.startswith("fathom") and not n.startswith(ALLOWED)]
    assert not bad, bad
