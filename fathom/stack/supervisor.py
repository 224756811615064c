"""Supervised child processes for `fathom launch`: servers that must stay up, and stages that must finish.

Each child runs in its own process group with its output in `logs/<name>.log`, so stopping a
child stops everything it started (vLLM's engine core, the sandbox zygote and its workers).

A server that dies while a stage runs is restarted with backoff (its whole process group is killed
first, so nothing it started lingers), and a hook re-applies what the restarted server forgot (the
merged weights, the policy version). A server that dies more than `Restarts.limit` times within
`Restarts.window_s`, a stage that fails, and a stage whose heartbeat file goes stale end the run
loudly: the message names the child and ends with the last lines of its log.
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

from fathom.unwind import sigterm_unwinds


class LaunchError(Exception):
    """A child failed: it names the child, what happened, and ends with its log's last lines."""


@dataclass(frozen=True)
class Restarts:
    """How dead servers come back: the delay doubles from `backoff_s` up to `backoff_max_s`; more than `limit`
    restarts of one server within `window_s` ends the run. `limit` 0 never restarts."""

    limit: int = 3
    window_s: float = 3600.0
    backoff_s: float = 2.0
    backoff_max_s: float = 60.0
    start_timeout_s: float = 600.0
    """A restarted server not healthy within this long is killed, which counts as another death."""


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
    server: bool = False
    """Kept up and restarted when it dies (stages run once)."""
    on_restart: Callable[["Child"], None] | None = None
    """Called once a restarted server is healthy again, to re-apply state it lost (weights, versions)."""
    restarts: list[float] = field(default_factory=list)
    """When it was restarted (monotonic seconds)."""
    restart_at: float | None = None
    """Dead, and due to restart at this time."""
    starting_since: float | None = None
    """Restarted and not yet healthy since this time."""
    env: dict[str, str] = field(default_factory=dict)
    """Added to the supervisor's environment for this child."""

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
    restarts: Restarts = field(default_factory=Restarts)
    on_event: Callable[[str], None] | None = None
    """Told of each restart, as one line (the launch command prints it)."""
    children: list[Child] = field(default_factory=list)
    events: list[str] = field(default_factory=list)

    def __enter__(self) -> "Supervisor":
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # SIGTERM (from a job runner) unwinds like Ctrl-C, so the finally blocks stop every child.
        self._old_term = sigterm_unwinds()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop_all()
        finally:
            if self._old_term is not None:
                signal.signal(signal.SIGTERM, self._old_term)

    def _popen(self, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
        log = open(log_path, "ab", buffering=0)
        try:
            return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=self.env | (env or {}), start_new_session=True)
        finally:
            log.close()

    def spawn(self, name: str, argv: list[str], health_url: str | None = None, *, server: bool = False,
              on_restart: Callable[[Child], None] | None = None, env: dict[str, str] | None = None) -> Child:
        """Start `argv` in its own process group, output to `<log_dir>/<name>.log`; `env` adds to the
        supervisor's environment for this child (and its restarts)."""
        log_path = self.log_dir / f"{name}.log"
        child = Child(name, argv, log_path, self._popen(argv, log_path, env), health_url, server, on_restart,
                      env=dict(env or {}))
        self.children.append(child)
        return child

    def child(self, name: str) -> Child:
        """The running child called `name`."""
        found = next((c for c in self.children if c.name == name), None)
        if found is None:
            raise LaunchError(f"no child called {name!r} is running (running: {[c.name for c in self.children]})")
        return found

    def stop(self, name: str) -> None:
        """Stop child `name` (its whole process group: SIGTERM, SIGKILL after `stop_timeout_s`) and forget it."""
        c = self.child(name)
        self._stop(c, self.stop_timeout_s)
        self.children.remove(c)

    def serve(self, name: str, argv: list[str], health_url: str | None, timeout_s: float,
              on_tick: Callable[[str], None] | None = None,
              on_restart: Callable[[Child], None] | None = None, env: dict[str, str] | None = None) -> Child:
        """Start a server and wait until `health_url` answers 200 (no URL: started is enough)."""
        child = self.spawn(name, argv, health_url or None, server=True, on_restart=on_restart, env=env)
        return self.wait_healthy(child, timeout_s, on_tick)

    def wait_healthy(self, child: Child, timeout_s: float, on_tick: Callable[[str], None] | None = None) -> Child:
        """Wait until `child`'s health URL answers 200 (no URL: started is enough). Servers spawned together
        and then waited for start side by side."""
        if not child.health_url:
            return child
        t0 = time.monotonic()
        with httpx.Client(timeout=2.0) as http:
            while True:
                if not child.alive():
                    raise child.failure(f"exited with code {child.proc.returncode} before it was healthy")
                try:
                    if http.get(child.health_url).status_code == 200:
                        return child
                except httpx.HTTPError:
                    pass
                waited = time.monotonic() - t0
                if waited > timeout_s:
                    raise child.failure(f"was not healthy at {child.health_url} within {timeout_s:.0f} s")
                if on_tick:
                    on_tick(f"starting {child.name}: {waited:.0f} s")
                time.sleep(self.poll_s)

    def replace(self, name: str, argv: list[str], health_url: str | None, timeout_s: float,
                on_tick: Callable[[str], None] | None = None,
                on_restart: Callable[["Child"], None] | None = None) -> Child:
        """Stop server `name` (its whole process group) and start it again with `argv`, e.g. other settings for
        the next stage; waits until it is healthy, like `serve`."""
        old = next((c for c in self.children if c.server and c.name == name), None)
        if old is None:
            raise LaunchError(f"{name} cannot be restarted: no server of that name is running")
        self._note(old, f"stopped, to start again as: {' '.join(argv)}")
        self._stop(old, self.stop_timeout_s)
        self.children.remove(old)
        if health_url and not self._silent(health_url, self.stop_timeout_s):
            # Else the health wait below would take the old server's answer for the new one's.
            raise LaunchError(f"{name} was stopped, but {health_url} still answers after {self.stop_timeout_s:.0f} s: "
                              "a process outside its process group holds the port; stop that process and run again")
        return self.serve(name, argv, health_url, timeout_s, on_tick=on_tick, on_restart=on_restart)

    def _silent(self, url: str, timeout_s: float) -> bool:
        """True once nothing answers at `url`, False if something still does after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0) as http:
            while True:
                try:
                    http.get(url)
                except httpx.HTTPError:
                    return True
                if time.monotonic() > deadline:
                    return False
                time.sleep(self.poll_s)

    def check_servers(self) -> None:
        """Restart dead servers (with backoff), finish restarts whose server is healthy again, and raise
        LaunchError when one died too often. Stages are checked by `run_stage`."""
        now = time.monotonic()
        for c in [c for c in self.children if c.server]:
            if c.starting_since is not None and c.alive():
                self._finish_restart(c, now)
            elif c.restart_at is not None:
                if now >= c.restart_at:
                    self._restart(c, now)
            elif not c.alive():
                self._schedule_restart(c, now)

    def _note(self, c: Child, line: str) -> None:
        self.events.append(line)
        try:
            with open(c.log_path, "a") as fh:
                fh.write(f"--- fathom launch: {line}\n")
        except OSError:
            pass
        if self.on_event:
            self.on_event(line)

    def _schedule_restart(self, c: Child, now: float) -> None:
        code = c.proc.returncode
        _signal_group(c.proc, signal.SIGKILL)  # what it started (vLLM's engine core, sandbox workers) goes too
        r = self.restarts
        recent = [t for t in c.restarts if now - t < r.window_s]
        if len(recent) >= r.limit:
            raise c.failure(f"died with code {code} after {len(recent)} restarts within {r.window_s:g} s "
                            f"(launch.max_restarts = {r.limit}); the run cannot go on without it")
        delay = min(r.backoff_s * 2 ** len(recent), r.backoff_max_s)
        c.restart_at = now + delay
        c.starting_since = None
        self._note(c, f"{c.name} died with code {code}; restarting it in {delay:g} s "
                      f"(restart {len(recent) + 1} of at most {r.limit} within {r.window_s:g} s)")

    def _restart(self, c: Child, now: float) -> None:
        c.proc = self._popen(c.argv, c.log_path, c.env)
        c.restarts.append(now)
        c.restart_at = None
        c.starting_since = now
        if not c.health_url:
            self._finish_restart(c, now)

    def _finish_restart(self, c: Child, now: float) -> None:
        if c.health_url:
            try:
                healthy = httpx.get(c.health_url, timeout=2.0).status_code == 200
            except httpx.HTTPError:
                healthy = False
            if not healthy:
                if now - c.starting_since > self.restarts.start_timeout_s:  # type: ignore[operator]
                    self._note(c, f"{c.name} was not healthy within {self.restarts.start_timeout_s:g} s of its restart")
                    _signal_group(c.proc, signal.SIGKILL)  # counted as another death on the next check
                    c.proc.wait()
                return
        c.starting_since = None
        if c.on_restart is not None:
            try:
                c.on_restart(c)
            except Exception as e:  # a server that lost state it cannot get back ends the run
                raise c.failure(f"restarted, but its state could not be restored: {e}") from e
        self._note(c, f"{c.name} is back (pid {c.proc.pid})")

    def run_stage(self, name: str, argv: list[str], *, heartbeat: Path | None = None,
                  stall_s: float | None = None) -> None:
        """Run a stage to completion while the servers stay up; its output goes to the terminal and its log.

        With `heartbeat` and `stall_s`: a stage whose heartbeat file (or, before it exists, the stage itself)
        is older than `stall_s` is stopped and the run ends. This catches a trainer too stuck for its own
        watchdog (stopped, or wedged in C with the watchdog thread starved)."""
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
        t0 = time.time()
        while child.alive():
            self.check_servers()
            if stall_s is not None and heartbeat is not None:
                try:
                    beat = max(t0, heartbeat.stat().st_mtime)
                except OSError:
                    beat = t0
                if time.time() - beat > stall_s:
                    _signal_group(proc, signal.SIGKILL)
                    proc.wait()
                    copier.join(timeout=5)
                    self.children.remove(child)
                    raise child.failure(f"stalled: {heartbeat} not updated for {time.time() - beat:.0f} s "
                                        f"(limit {stall_s:g} s: trainer.watchdog_s + launch.stall_grace_s); "
                                        "stopped it")
            time.sleep(self.poll_s)
        # The stage is gone, but what it started may not be: TRL's spawned rollout child survived a SIGTERM of
        # `fathom train` (its group had been signalled once) and kept running episodes against dead servers.
        _signal_group(proc, signal.SIGKILL)
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
            self._stop(c, max(deadline - time.monotonic(), 0.1), term=False)
        self.children.clear()

    @staticmethod
    def _stop(c: Child, timeout_s: float, term: bool = True) -> None:
        """SIGTERM `c`'s process group (unless the caller did), then SIGKILL what is left after `timeout_s`."""
        if term:
            _signal_group(c.proc, signal.SIGTERM)
        try:
            c.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        _signal_group(c.proc, signal.SIGKILL)  # also reaps grandchildren that outlived their parent
        try:
            c.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


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
