"""Tests that need a fresh interpreter: what an import pulls in, hash-seed independence, thread pinning.

Each starts one `python -c` child, so they sit in the integration tier (the unit tier starts no process).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fathom.tasks import FAMILIES, generate


@pytest.mark.parametrize("module", ["fathom.entrypoints.cli"])
def test_cli_import_is_light(module):
    """`fathom --help` must not import torch, transformers or vLLM."""
    code = f"import sys, {module}; heavy = [m for m in ('torch', 'transformers', 'vllm', 'trl') if m in sys.modules]; print(heavy)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_same_task_in_a_fresh_process_with_other_hash_seed() -> None:
    code = ("from fathom.tasks import FAMILIES, generate\n"
            "print(' '.join(generate(f, 1000004, 8192).digest() for f in FAMILIES))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout.split()
    assert out == [generate(f, 1000004, 8192).digest() for f in FAMILIES]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_pin_process_moves_every_thread_of_the_rollout_child():
    """The child starts on the trainer's pinned core; all its threads (queue feeders included) must leave it."""
    first = sorted(os.sched_getaffinity(0))[0]
    code = ("import os, threading, time\nfrom fathom.rollout_worker.groups import pin_process\n"
            "threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n"
            f"pin_process([{first}])\n"
            "print(sorted({tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir('/proc/self/task')}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"[({first},)]"
