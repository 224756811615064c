"""Process-wide defaults the trainer-side commands set before torch loads."""

from __future__ import annotations

import os
import subprocess
import sys

from fathom.entrypoints.common import passive_omp


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
