"""bench/gpu_device_check.sh: its dry run and the message when TRL's wheel was not brought."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench/gpu_device_check.sh"


def _run(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PY="python3", **env))


def test_dry_run_unpacks_the_wheel_and_runs_the_check_under_a_time_limit(tmp_path):
    wheel = tmp_path / "trl-1.15.0-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    r = _run(DRY_RUN="1", TRL_WHEEL=str(wheel))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"+ python3 -m zipfile -e {wheel} ")
    assert lines[1] == "+ timeout 480 python3 bench/gpu_device_check.py --device cuda --steps 3"  # under 8 minutes


def test_a_missing_wheel_says_how_to_bring_it(tmp_path):
    r = _run(TRL_WHEEL=str(tmp_path / "absent.whl"))
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["targets"] == [] and "make device-check-wheels" in doc["error"]
