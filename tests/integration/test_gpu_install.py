"""The GPU install cannot drift: driver checked first, one pinned CUDA build of torch in both venvs, only the system
packages the job needs, a pinned image in the README's job examples. Checked with `make -n` and a fake nvidia-smi."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts/check_gpu_driver.sh"


def fake_smi(tmp_path: Path, driver: str | None) -> dict[str, str]:
    """PATH with an nvidia-smi that reports `driver` (None: no nvidia-smi at all) and the usual tools."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "head"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    if driver is not None:
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/bin/bash\ncase \"$*\" in *driver_version*) echo " + driver + ";; "
                       "*name*) echo 'NVIDIA A100-SXM4-80GB';; esac\n")
        smi.chmod(0o755)
    return {"PATH": str(bin_dir)}


@pytest.mark.parametrize("driver,ok", [("580.82.07", True), ("590.1", True), ("570.86.15", False), (None, False),
                                       ("NVIDIA-SMI has failed", False)])
def test_the_driver_check_fails_in_seconds_with_the_reason(tmp_path, driver, ok):
    t0 = time.monotonic()
    r = subprocess.run([shutil.which("bash"), str(CHECK), "13.0", "580"], capture_output=True, text=True,
                       env=fake_smi(tmp_path, driver), timeout=30)
    assert time.monotonic() - t0 < 10
    assert (r.returncode == 0) == ok, r.stderr
    if ok:
        assert driver in r.stdout and "A100" in r.stdout
    elif driver is None:
        assert "nvidia-smi not found" in r.stderr
    elif driver.startswith("5"):
        assert f"driver {driver} is older than 580" in r.stderr and "CUDA 13.0" in r.stderr


def test_the_gpu_set_up_checks_the_driver_first_and_pins_one_cuda_build(tmp_path):
    r = subprocess.run(["make", "-n", "setup-gpu", f"STAMPS={tmp_path / 'stamps'}"], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stdout.splitlines() if not x.startswith(("make[", "#"))]
    assert lines[0].startswith("bash scripts/check_gpu_driver.sh 13.0 580")
    pip = [x for x in lines if re.search(r"/bin/pip install", x)]
    torch_lines = [x for x in pip if "torch==" in x]
    assert len(torch_lines) == 2 and {x.split("/bin/pip")[0] for x in torch_lines} == {".venv", ".venv-vllm"}
    assert all("'torch==2.13.0+cu130'" in x and "download.pytorch.org/whl/cu130" in x for x in torch_lines)
    # torch comes before vLLM in its venv, so vLLM's torch==2.13.0 is already met by the CUDA build
    assert pip.index(torch_lines[1]) < pip.index(next(x for x in pip if "'vllm==0.32.0'" in x and "venv-vllm" in x))
    text = r.stdout
    assert "bubblewrap" in text and not re.search(r"chromium|podman|debootstrap|shellcheck", text)
    assert "gpu-torch-check" in text and "-m pip install -q -e ." not in text.replace("'.[test]'", "")


def test_readme_job_examples_pin_the_image():
    readme = (ROOT / "README.md").read_text()
    images = re.findall(r'image="([^"]+)"', readme)
    assert images and all(not i.endswith(":latest") and re.search(r":v\d+\.\d+\.\d+$", i) for i in images), images
