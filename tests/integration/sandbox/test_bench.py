"""bench/sandbox.py fails (exit 1, layer target unmet) when a layer the shipped config requires is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

_STUB = """
import runpy, sys
sys.path.insert(0, sys.argv[1])
from fathom.env_server.sandbox import layers
real = layers.detect_layers
layers.detect_layers = lambda: {**real(), "seccomp": {"available": False, "detail": "stubbed away by the test"}}
sys.argv = ["bench/sandbox.py", "--runs", "5", "--episodes", "1"]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_bench_fails_when_a_shipped_layer_is_missing():
    p = subprocess.run([sys.executable, "-c", _STUB, str(ROOT)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    out = json.loads(p.stdout)
    layer = next(t for t in out["targets"] if t["name"] == "shipped required layers active")
    assert layer["met"] is False and "seccomp" in layer["target"] and "seccomp" in out["error"]
