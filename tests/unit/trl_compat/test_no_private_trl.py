"""No fathom module outside fathom/trl_compat reaches into TRL's private API: it imports no `_name` from `trl`,
reads no `_name` of a TRL module or class, assigns no attribute of one (a monkeypatch), and defines no `_name` in a
subclass of a TRL class (an override of a private member). Checked by walking every module's AST."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[3] / "fathom"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _trl_names(tree: ast.AST) -> tuple[set[str], list[tuple[int, str]]]:
    """Names bound to TRL modules or objects, and the private imports found on the way."""
    names: set[str] = set()
    bad: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "trl":
                    names.add(a.asname or "trl")
                    if any(_private(p) for p in a.name.split(".")):
                        bad.append((node.lineno, f"imports private module {a.name}"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "trl":
            if any(_private(p) for p in node.module.split(".")):
                bad.append((node.lineno, f"imports from private module {node.module}"))
            for a in node.names:
                names.add(a.asname or a.name)
                if _private(a.name):
                    bad.append((node.lineno, f"imports private {node.module}.{a.name}"))
    return names, bad


def _base_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _uses(tree: ast.AST, trl: set[str]) -> list[tuple[int, str]]:
    bad: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and _base_name(node.value) in trl:
            bad.append((node.lineno, f"uses private {ast.unparse(node)}"))
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for t in targets:
            if isinstance(t, ast.Attribute) and _base_name(t) in trl:
                bad.append((node.lineno, f"patches {ast.unparse(t)}"))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr")
                and node.args and _base_name(node.args[0]) in trl):
            bad.append((node.lineno, f"patches {ast.unparse(node.args[0])} with {node.func.id}"))
        if isinstance(node, ast.ClassDef) and any(_base_name(b) in trl for b in node.bases):
            for item in node.body:
                defined = ([item.name] if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) else
                           [t.id for t in getattr(item, "targets", [getattr(item, "target", None)])
                            if isinstance(t, ast.Name)])
                bad += [(item.lineno, f"{node.name}, a subclass of a TRL class, defines private {n}") for n in defined
                        if _private(n)]
    return bad


def violations(root: Path = PKG) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] == "trl_compat":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        trl, bad = _trl_names(tree)
        bad += _uses(tree, trl)
        out += [f"{path.relative_to(root.parent)}:{n}: {what}" for n, what in sorted(bad)]
    return out


def test_only_trl_compat_reaches_into_trls_private_api():
    assert violations() == []


def test_checker_catches_each_kind_of_reach(tmp_path):
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "a.py").write_text(
        "from trl.experimental.async_grpo.async_grpo_trainer import _iter_vllm_named_params\n"
        "import trl.trainer._private_module\n")
    (tmp_path / "trainer" / "b.py").write_text(
        "import trl.trainer.utils as u\n"
        "from trl.experimental.async_grpo import async_rollout_worker as arw, weight_transfer\n"
        "from trl.experimental.async_grpo import AsyncGRPOTrainer\n"
        "u.get_peak_flops_per_device = None\n"  # patches a public global: still a patch
        "setattr(arw, 'is_vllm_available', lambda: True)\n"
        "ok = weight_transfer._HAS_STATEFUL_TRAINER_ENGINE\n"
        "class T(AsyncGRPOTrainer):\n"
        "    _loop_cls = None\n"
        "    def _sync_weight(self): ...\n"
        "    def compute_loss(self): ...\n")  # public: allowed
    (tmp_path / "trl_compat").mkdir()
    (tmp_path / "trl_compat" / "x.py").write_text("from trl.x import _y\n")  # the one place allowed
    (tmp_path / "ok.py").write_text("import trl\nfrom trl import SFTConfig\nv = trl.__version__\n")
    got = violations(tmp_path)
    assert len(got) == 7, got
    assert sum("a.py" in g for g in got) == 2 and not any("trl_compat" in g or "ok.py" in g for g in got)
