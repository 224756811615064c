"""Every shell script the project ships passes shellcheck (make setup installs it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.relative_to(ROOT).as_posix() for d in ("", "bench", "scripts") for p in (ROOT / d).glob("*.sh"))


def test_the_shipped_scripts_are_all_found():
    assert {"run_job.sh", "run_eval_watch.sh", "bench/gpu_device_check.sh", "scripts/check_gpu_driver.sh"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_passes_shellcheck(script: str) -> None:
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is not installed; `make setup` installs it (Debian package shellcheck)")
    out = subprocess.run(["shellcheck", str(ROOT / script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout
