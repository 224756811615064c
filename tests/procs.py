"""Processes as /proc shows them, for tests that check what a server, sandbox or benchmark leaves running."""

from __future__ import annotations

from pathlib import Path


def _stat_fields(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state first, then ppid, pgrp, ...)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def descendants(pid: int) -> set[int]:
    """Every process below `pid` in the process tree now (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                children.setdefault(int(_stat_fields(d.name)[1]), []).append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    found, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in found:
                found.add(c)
                todo.append(c)
    return found


def state(pid: int) -> str:
    """The process's state letter (R, S, Z, ...), or "gone"."""
    try:
        return _stat_fields(pid)[0]
    except (OSError, IndexError):
        return "gone"


def alive(pid: int) -> bool:
    """Running, not a zombie."""
    return state(pid) not in ("Z", "gone")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
