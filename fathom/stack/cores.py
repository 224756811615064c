"""Keep a process tree off some cores for a while: `fathom launch` frees the trainer's cores during GRPO.

`trainer.cpu_cores` pins the trainer, and vLLM binds its model worker to `policy_server.cpu_cores`, but the rest
of the stack floats: vLLM's API server, the capture proxy, the env server and its sandboxes. On 2 cores they ran
on the trainer's core too; fenced off it, the trainer's median fwd+bwd rate went from 55.6 to 76.7 tok/s
(docs/main_job.md, "Where the time goes"). `CoreFence` narrows the affinity of every thread in the launcher's
tree (the launcher and every server it started, with their children) to the other cores, and puts each thread's
own mask back afterwards, so the evaluation that follows gets every core again.

Threads born while the fence stands inherit the narrowed mask from their parent (a restarted server, a new
sandbox); `restore` widens those that still carry it to the launcher's old mask. A thread already confined to the
free cores (vLLM's model worker bound to core 0) is left exactly as it is. Linux only (/proc); elsewhere a no-op.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PROC = Path("/proc")


def children_of(pid: int) -> list[int]:
    """Direct children of `pid`, from each thread's /proc/<pid>/task/<tid>/children."""
    kids: list[int] = []
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return kids
    for task in tasks:
        try:
            kids += [int(k) for k in (task / "children").read_text().split()]
        except (OSError, ValueError):
            pass
    return kids


def tree(root: int) -> list[int]:
    """`root` and every descendant process, parents before children."""
    out, todo, seen = [], [root], set()
    while todo:
        pid = todo.pop(0)
        if pid in seen:
            continue
        seen.add(pid)
        out.append(pid)
        todo += children_of(pid)
    return out


def threads(pid: int) -> list[int]:
    try:
        return [int(t.name) for t in (PROC / str(pid) / "task").iterdir()]
    except (OSError, ValueError):
        return []


class CoreFence:
    """Narrow every thread of a process tree to the cores not in `off`, then restore each thread's mask."""

    def __init__(self, off: set[int] | list[int], root: int | None = None):
        self.off = set(off)
        self.root = os.getpid() if root is None else root
        self.saved: dict[int, set[int]] = {}
        """Thread id -> the mask it had before the fence (only threads whose mask was changed)."""
        self.seen: set[int] = set()
        """Every thread that existed when the fence went up."""
        self.root_mask: set[int] | None = None
        """The root's mask before the fence: what threads born under the fence are widened to."""

    def apply(self) -> int:
        """Narrow the tree now; returns how many threads were narrowed."""
        if not PROC.is_dir() or not hasattr(os, "sched_setaffinity"):
            return 0
        if self.root_mask is None:
            self.root_mask = os.sched_getaffinity(self.root)
        narrowed = 0
        for pid in tree(self.root):
            for tid in threads(pid):
                if tid in self.seen:
                    continue
                self.seen.add(tid)
                try:
                    mask = os.sched_getaffinity(tid)
                except OSError:
                    continue
                free = mask - self.off
                if not free or free == mask:  # nowhere else to go, or already clear of the fenced cores
                    continue
                try:
                    os.sched_setaffinity(tid, free)
                except OSError:
                    continue
                self.saved[tid] = mask
                narrowed += 1
        return narrowed

    def restore(self) -> int:
        """Put back each narrowed thread's mask, and widen threads born under the fence that still carry the
        narrowed mask to the root's old mask. Returns how many threads were changed."""
        if self.root_mask is None:
            return 0
        fenced = self.root_mask - self.off
        changed = 0
        for pid in tree(self.root):
            for tid in threads(pid):
                mask = self.saved.get(tid)
                try:
                    if mask is None:
                        if tid in self.seen or os.sched_getaffinity(tid) != fenced:
                            continue  # untouched, or a mask its process chose itself
                        mask = self.root_mask
                    os.sched_setaffinity(tid, mask)
                    changed += 1
                except OSError:
                    continue
        self.saved.clear()
        self.seen.clear()
        self.root_mask = None
        return changed

    def __enter__(self) -> "CoreFence":
        self.apply()
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


@contextlib.contextmanager
def trainer_fence(cfg, stage: str, console=None):
    """While GRPO runs with `trainer.cpu_cores` set and `launch.fence_trainer_cores` on, the launcher and every
    server it started stay off the trainer's cores (`CoreFence`); otherwise nothing changes."""
    if stage != "grpo" or not cfg.launch.fence_trainer_cores or not cfg.trainer.cpu_cores:
        yield
        return
    from fathom.config.cpus import parse_cpu_list

    with CoreFence(parse_cpu_list(cfg.trainer.cpu_cores)) as fence:
        if console is not None:
            console.print(f"{len(fence.saved)} server threads kept off the trainer's cores "
                          f"({cfg.trainer.cpu_cores}) while GRPO trains")
        yield
