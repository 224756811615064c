"""The import table of STYLE.md, enforced by walking every module's AST."""

from __future__ import annotations

import ast
from pathlib import Path


PKG = Path(__file__).resolve().parents[2] / "fathom"

# package -> fathom packages it may import (its own package is always allowed).
ALLOWED: dict[str, set[str]] = {
    "config": set(),
    "protocol": set(),
    # Every reach into TRL's private API. The rollout worker (TRL's loop) and the trainer both need it, and the
    # rollout worker may not import the trainer, so it is a package of its own that imports no other fathom package.
    "trl_compat": set(),
    "tasks": {"protocol", "config"},
    "policy_server": {"config"},
    "capture_proxy": {"protocol", "config"},
    "env_server": {"tasks", "protocol", "config"},
    "rollout_worker": {"env_server.client", "env_server.models", "tasks", "protocol", "config", "trl_compat"},
    "trainer": {"rollout_worker", "protocol", "config", "trl_compat"},
    "eval": {"rollout_worker", "env_server.client", "env_server.models", "tasks", "protocol", "config"},
    "ui": {"tasks", "protocol", "config"},
}


def _package_of(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    return rel.parts[0] if rel.parts else ""


def _fathom_imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "fathom"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "fathom":
            mods = [node.module] if node.module != "fathom" else [f"fathom.{a.name}" for a in node.names]
            found += [(node.lineno, m) for m in mods]
    return found


def _allowed(pkg: str, target: str, rel_module: str) -> bool:
    parts = target.split(".")[1:]
    if not parts or parts[0] == pkg:
        # Inside env_server, the client side must not reach into the server side.
        if pkg == "env_server" and rel_module.startswith("env_server.client") and target.startswith("fathom.env_server.server"):
            return False
        return True
    dotted = ".".join(parts)
    return any(dotted == a or dotted.startswith(a + ".") for a in ALLOWED[pkg])


def violations(root: Path = PKG) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        pkg = _package_of(path, root)
        if pkg not in ALLOWED:  # entrypoints and the package root may import anything
            continue
        rel_module = ".".join(path.relative_to(root).with_suffix("").parts)
        for lineno, target in _fathom_imports(path):
            if not _allowed(pkg, target, rel_module):
                bad.append(f"{path.relative_to(root.parent)}:{lineno}: {pkg} imports {target}")
    return bad


def test_import_table_holds():
    assert violations() == []


def test_checker_catches_a_forbidden_import(tmp_path):
    (tmp_path / "capture_proxy").mkdir()
    (tmp_path / "capture_proxy" / "bad.py").write_text("from fathom.env_server.server import app\n")
    (tmp_path / "env_server").mkdir()
    (tmp_path / "env_server" / "client.py").write_text("import fathom.env_server.server.app\n")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "x.py").write_text("from fathom import protocol\n")
    got = violations(tmp_path)
    assert len(got) == 3, got


# fathom.testing (fakes for tests and benchmarks) is imported by no fathom module but the command that serves it.
TESTING_IMPORTERS = {"entrypoints/env_cmd.py"}


def _testing_violations(root: Path = PKG) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("testing/") or rel in TESTING_IMPORTERS:
            continue
        bad += [f"{path.relative_to(root.parent)}:{n}: imports {t}" for n, t in _fathom_imports(path)
                if t == "fathom.testing" or t.startswith("fathom.testing.")]
    return bad


def test_production_code_never_imports_the_testing_package(tmp_path):
    assert _testing_violations() == []
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "x.py").write_text("from fathom.testing.fake_vllm import create_fake_vllm\n")
    assert len(_testing_violations(tmp_path)) == 1
