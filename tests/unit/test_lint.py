"""Every `noqa` says why on its own line: `# noqa: CODE - reason` (ruff itself checks the codes are used)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOQA = re.compile(r"#\s*noqa\b(?P<rest>.*)$")
WITH_REASON = re.compile(r"^:\s*[A-Z]+[0-9]+(\s*,\s*[A-Z]+[0-9]+)*\s+-\s+\S")


def noqa_without_reason(text: str) -> list[int]:
    """Line numbers (1-based) whose `noqa` names no rule code or gives no reason after ` - `."""
    bad = []
    for n, line in enumerate(text.splitlines(), 1):
        m = NOQA.search(line)
        if m and not WITH_REASON.match(m.group("rest")):
            bad.append(n)
    return bad


def test_the_checker_tells_bare_from_explained():
    assert noqa_without_reason("x = 1  # noqa\n") == [1]
    assert noqa_without_reason("import os  # noqa: F401\n") == [1]
    assert noqa_without_reason("except Exception:  # noqa: BLE001 - the page shows it\n") == []
    assert noqa_without_reason("a\nb  # noqa: E402, F401 - path set above\n") == []


def test_every_noqa_in_the_tree_gives_a_reason():
    files = [p for d in ("fathom", "bench", "tests") for p in (ROOT / d).rglob("*.py") if p != Path(__file__).resolve()]
    bad = [f"{p.relative_to(ROOT)}:{n}" for p in files for n in noqa_without_reason(p.read_text())]
    assert not bad, "noqa without `CODE - reason` on the same line: " + ", ".join(bad)
