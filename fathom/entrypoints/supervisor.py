"""Supervised child processes for `fathom launch`: servers that must stay up, and stages that must finish.

Each child runs in its own process group with its output in `logs/<name>.log`, so stopping a
child stops everything it started (vLLM's engine core, the sandbox zygote and its workers).
A server that dies while a stage runs ends the run loudly, with the last lines of its log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx


class LaunchError(Exception):
    """A child failed: it names the child, what happened, and ends with its log's last lines."""


def tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen
    health_url: str | None = None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def failure(self, what: str) -> LaunchError:
        return LaunchError(f"{self.name} {what}; last lines of {self.log_path}:\n{tail(self.log_path)}")


@dataclass
class Supervisor:
    """Starts children, watches them, and stops every one on exit (success, failure or Ctrl-C)."""

    log_dir: Path
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    stop_timeout_s: float = 20.0
    poll_s: float = 0.5
    children: list[Child] = field(default_factory=list)

    def __enter__(self) -> "Supervisor":
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # SIGTERM (from a job runner) unwinds like Ctrl-C, so the finally blocks stop every child.
        self._old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop_all()
        finally:
            signal.signal(signal.SIGTERM, self._old_term)

    def spawn(self, name: str, argv: list[str], health_url: str | None = None) -> Child:
        log_path = self.log_dir / f"{name}.log"
        log = open(log_path, "ab", buffering=0)
        try:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=self.env, start_new_session=True)
        finally:
            log.close()
        child = Child(name, argv, log_path, proc, health_url)
        self.children.append(child)
        return child

    def serve(self, name: str, argv: list[str], health_url: str, timeout_s: float,
              on_tick: Callable[[str], None] | None = None) -> Child:
        """Start a server and wait until `health_url` answers 200."""
        child = self.spawn(name, argv, health_url)
        t0 = time.monotonic()
        with httpx.Client(timeout=2.0) as http:
            while True:
                if not child.alive():
                    raise child.failure(f"exited with code {child.proc.returncode} before it was healthy")
                try:
                    if http.get(health_url).status_code == 200:
                        return child
                except httpx.HTTPError:
                    pass
                waited = time.monotonic() - t0
                if waited > timeout_s:
                    raise child.failure(f"was not healthy at {health_url} within {timeout_s:.0f} s")
                if on_tick:
                    on_tick(f"starting {name}: {waited:.0f} s")
                time.sleep(self.poll_s)

    def check_servers(self) -> None:
        """Raise if any server died (stages are checked by `run_stage`)."""
        for c in self.children:
            if c.health_url and not c.alive():
                raise c.failure(f"died with code {c.proc.returncode}")

    def run_stage(self, name: str, argv: list[str]) -> None:
        """Run a stage to completion while the servers stay up; its output goes to the terminal and its log."""
        env = dict(self.env)
        if sys.stdout.isatty():
            env["TTY_COMPATIBLE"] = "1"  # rich keeps its live progress bar although the stage writes to a pipe
        log_path = self.log_dir / f"{name}.log"
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
        child = Child(name, argv, log_path, proc)
        self.children.append(child)
        copier = threading.Thread(target=_copy, args=(proc.stdout, log_path), daemon=True)
        copier.start()
        while child.alive():
            self.check_servers()
            time.sleep(self.poll_s)
        copier.join(timeout=5)
        self.children.remove(child)
        if proc.returncode != 0:
            raise child.failure(f"stage failed with exit code {proc.returncode} (command: {' '.join(argv)})")

    def stop_all(self) -> None:
        """SIGTERM every child's process group, newest first; SIGKILL what is left after the timeout."""
        for c in reversed(self.children):
            _signal_group(c.proc, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        for c in reversed(self.children):
            try:
                c.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(c.proc, signal.SIGKILL)  # also reaps grandchildren that outlived their parent
            try:
                c.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.children.clear()


def _copy(stream, log_path: Path) -> None:
    """Copy a stage's output to the terminal and its log as it arrives."""
    out = sys.stdout.buffer
    with open(log_path, "ab") as log:
        for chunk in iter(lambda: stream.read1(65536), b""):
            out.write(chunk)
            out.flush()
            log.write(chunk)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _raise_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
