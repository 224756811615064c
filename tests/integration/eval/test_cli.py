"""`fathom eval` refuses bad input before starting anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_bad_task_ids_are_named(tmp_path):
    for bad, msg in (("needle-1k", "expected FAMILY-LENGTH-sSEED"), ("poetry-1k-s1000000", "names family 'poetry'")):
        r = subprocess.run([sys.executable, "-m", "fathom.entrypoints.cli", "eval", "--tasks", bad, "--out", str(tmp_path)],
                           capture_output=True, text=True, cwd=ROOT, timeout=120, env=os.environ)
        assert r.returncode == 2 and msg in r.stderr, r.stderr
