"""The sandbox package's modules import each other without cycles (type-only imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[3] / "fathom" / "env_server" / "sandbox"
PREFIX = "fathom.env_server.sandbox"


def _edges() -> dict[str, set[str]]:
    mods = {p.stem for p in PKG.glob("*.py") if p.stem != "__init__"}
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m in mods:
        for node in ast.walk(ast.parse((PKG / f"{m}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == PREFIX:
                    edges[m] |= {a.name for a in node.names if a.name in mods}
                elif node.module.startswith(PREFIX + "."):
                    edges[m].add(node.module.split(".")[3])
    return edges


def test_no_import_cycles_between_sandbox_modules():
    edges = _edges()

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    cycles = sorted(m for m in edges if m in reach(m))
    assert not cycles, f"sandbox modules in an import cycle: {cycles} ({ {m: sorted(edges[m]) for m in cycles} })"
    assert "results" in edges["api"] and "results" in edges["episode"]
