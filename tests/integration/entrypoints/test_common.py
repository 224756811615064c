"""Process-wide defaults the trainer-side commands set before torch loads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fathom.stack.threads import PinError, passive_omp, pin_cpus


def test_passive_omp_is_a_default_the_user_can_override(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    passive_omp()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    passive_omp()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_train_sets_it_before_torch_is_imported():
    # `fathom train` with a config that does not exist fails after passive_omp() ran and before torch loads.
    code = ("import os, sys\nfrom typer.testing import CliRunner\nfrom fathom.entrypoints.cli import app\n"
            "r = CliRunner().invoke(app, ['train', '-c', 'no/such.toml'])\n"
            "print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split()[-2:] == ["PASSIVE", "False"]


def test_pin_cpus_sets_affinity_and_threads_in_a_child():
    # In a child process: pinning is process-wide and would outlive the test here.
    allowed = sorted(os.sched_getaffinity(0))
    code = ("import os, torch\nfrom fathom.stack.threads import pin_cpus\n"
            f"print(pin_cpus('{allowed[-1]}'), sorted(os.sched_getaffinity(0)), os.environ['OMP_NUM_THREADS'], "
            "torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[-2] == f"[{allowed[-1]}] [{allowed[-1]}] 1 1"


def test_pin_cpus_names_the_setting_for_a_core_that_is_not_here():
    assert pin_cpus("") is None
    with pytest.raises(PinError) as e:
        pin_cpus("4000", "trainer.cpu_cores")
    assert "trainer.cpu_cores = '4000'" in str(e.value)


def test_progress_line_prints_every_5_percent_only_without_a_terminal():
    import io

    from rich.console import Console

    from fathom.entrypoints.common import progress_line

    log = io.StringIO()
    plain = Console(file=log, force_terminal=False, width=200)
    for step in range(1, 49):
        progress_line(plain, "SFT step", step, 48, f"loss {1 / step:.3f}")
    lines = log.getvalue().splitlines()
    assert lines[0] == "SFT step 2/48 loss 0.500" and lines[-1] == "SFT step 48/48 loss 0.021"
    assert len(lines) == 24
    tty = io.StringIO()
    for step in range(1, 49):
        progress_line(Console(file=tty, force_terminal=True), "SFT step", step, 48)
    assert tty.getvalue() == ""
