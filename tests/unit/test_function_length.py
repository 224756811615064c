"""No function in fathom/ is longer than 80 lines unless its docstring says why ("Long because ...")."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "fathom"
MAX_LINES = 80
REASON = "Long because"


def long_functions(root: Path = PKG) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES and REASON not in (ast.get_docstring(node) or ""):
                    bad.append(f"{path.relative_to(root.parent)}:{node.lineno}: {node.name} has {lines} lines; split "
                               f"it, or say why it is long in its docstring ('{REASON} ...')")
    return bad


def test_every_long_function_says_why():
    assert long_functions() == []


def test_the_check_finds_a_long_function_without_a_reason(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))
    (tmp_path / "long.py").write_text(f'def long():\n    """Does things."""\n{body}')
    (tmp_path / "said.py").write_text(f'def said():\n    """Does things.\n\n    {REASON} it is a table."""\n{body}')
    (tmp_path / "short.py").write_text('def short():\n    return 1\n')
    got = long_functions(tmp_path)
    assert len(got) == 1 and "long.py:1: long has" in got[0], got
