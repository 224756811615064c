"""CoreFence on real processes: a child tree is narrowed off a core and every thread's own mask comes back."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from fathom.stack.cores import CoreFence, threads, trainer_fence, tree

ALLOWED = sorted(os.sched_getaffinity(0))
needs_two = pytest.mark.skipif(len(ALLOWED) < 2, reason="needs two cores to fence one off")

# A parent with a second thread pinned by itself to the first core (as vLLM binds its worker), and a grandchild.
CHILD = f"""
import os, subprocess, sys, threading, time
first = {ALLOWED[0]}
def bound():
    os.sched_setaffinity(0, {{first}})
    time.sleep(60)
threading.Thread(target=bound, daemon=True).start()
sub = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(sub.pid, flush=True)
time.sleep(60)
"""


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    grandchild = int(proc.stdout.readline())
    time.sleep(0.3)  # the bound thread has pinned itself
    yield proc, grandchild
    proc.kill()
    proc.wait()
    try:
        os.kill(grandchild, 9)
    except ProcessLookupError:
        pass


def masks(pid: int) -> dict[int, set[int]]:
    return {tid: os.sched_getaffinity(tid) for tid in threads(pid)}


@needs_two
def test_fence_narrows_the_tree_and_restores_each_threads_own_mask(child):
    proc, grandchild = child
    assert tree(proc.pid) == [proc.pid, grandchild]
    before = masks(proc.pid) | masks(grandchild)
    bound = [tid for tid, m in before.items() if m == {ALLOWED[0]}]
    assert len(bound) == 1, before
    off = ALLOWED[-1]
    fence = CoreFence({off}, root=proc.pid)
    with fence:
        during = masks(proc.pid) | masks(grandchild)
        assert all(off not in m for m in during.values()), during
        assert during[bound[0]] == {ALLOWED[0]}  # already clear of the fenced core: untouched
        assert bound[0] not in fence.saved
    assert masks(proc.pid) | masks(grandchild) == before


@needs_two
def test_a_process_born_under_the_fence_is_widened_back(tmp_path):
    """A server restarted while GRPO ran inherits the narrowed mask; the evaluation must get every core."""
    parent = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.stdin.readline(); "
                               "import subprocess; p = subprocess.Popen([sys.executable, '-c', "
                               "'import time; time.sleep(60)']); print(p.pid, flush=True); time.sleep(60)"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        fence = CoreFence({ALLOWED[-1]}, root=parent.pid)
        fence.apply()
        parent.stdin.write("go\n")
        parent.stdin.flush()
        born = int(parent.stdout.readline())
        assert os.sched_getaffinity(born) == set(ALLOWED) - {ALLOWED[-1]}
        fence.restore()
        assert os.sched_getaffinity(born) == set(ALLOWED)
        assert os.sched_getaffinity(parent.pid) == set(ALLOWED)
    finally:
        parent.kill()
        parent.wait()


def test_a_fence_that_would_leave_no_core_changes_nothing(child):
    proc, grandchild = child
    before = masks(proc.pid)
    with CoreFence(set(ALLOWED), root=proc.pid) as fence:
        assert fence.saved == {}
        assert masks(proc.pid) == before


@pytest.mark.parametrize("stage,fence_on,cores", [("sft", True, "1"), ("grpo", False, "1"), ("grpo", True, "")])
def test_trainer_fence_is_only_for_grpo_with_pinned_trainer_cores(stage, fence_on, cores):
    cfg = SimpleNamespace(launch=SimpleNamespace(fence_trainer_cores=fence_on), trainer=SimpleNamespace(cpu_cores=cores))
    before = os.sched_getaffinity(0)
    with trainer_fence(cfg, stage):
        assert os.sched_getaffinity(0) == before


@needs_two
def test_trainer_fence_moves_this_process_off_the_trainer_core_and_back():
    cfg = SimpleNamespace(launch=SimpleNamespace(fence_trainer_cores=True),
                          trainer=SimpleNamespace(cpu_cores=str(ALLOWED[-1])))
    before = os.sched_getaffinity(0)
    with trainer_fence(cfg, "grpo"):
        assert os.sched_getaffinity(0) == before - {ALLOWED[-1]}
    assert os.sched_getaffinity(0) == before
