"""The zygote: a pre-loaded process that forks one fresh worker per episode.

Importing RestrictedPython, the whitelisted modules and the layer libraries once here
makes a new episode cost a fork instead of an interpreter start. Requests come over the
control socket: `fork` (with the episode socket and the context memfd attached) answers
with the worker's pidfd, so the host can SIGKILL a worker without asking the zygote;
`status` reaps a worker and reports how it ended.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from typing import Any

from fathom.env_server.sandbox import layers, wire, worker  # imported here so the forked workers share them

_MAX_STATUSES = 4096


class Zygote:
    def __init__(self, ctl: socket.socket, opts: dict[str, Any]) -> None:
        self.ctl, self.opts = ctl, opts
        # Workers are named by a token, never by pid: a pid can be reused by a later worker,
        # and a status request for a stale pid must not wait on (or kill) the new one.
        self.children: dict[int, tuple[str, int]] = {}  # pid -> (tmpdir, token)
        self.tokens: dict[int, int] = {}  # token -> pid, while the worker is unreaped
        self.statuses: dict[int, int] = {}  # token -> wait status
        self.next_token = 1
        self.tmp_root = tempfile.mkdtemp(prefix="fathom-sandbox-")
        self.opts["read_paths"] = layers.python_read_paths()
        signal.signal(signal.SIGCHLD, self._on_sigchld)

    def _on_sigchld(self, *_: Any) -> None:
        self._reap(0)

    def _reap(self, pid: int, block: bool = False) -> None:
        while True:
            try:
                got, status = os.waitpid(pid if pid else -1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return
            if got == 0:
                return
            entry = self.children.pop(got, None)
            if entry is not None:
                tmpdir, token = entry
                self.tokens.pop(token, None)
                self.statuses[token] = status
                if len(self.statuses) > _MAX_STATUSES:
                    self.statuses.pop(next(iter(self.statuses)))
                shutil.rmtree(tmpdir, ignore_errors=True)
            if pid:
                return

    def fork(self, msg: dict[str, Any], fds: list[int]) -> None:
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            wire.send(self.ctl, {"ok": False, "error": f"fork request carried {len(fds)} fds, expected 2"})
            return
        sock_fd, ctx_fd = fds
        tmpdir = tempfile.mkdtemp(prefix="ep-", dir=self.tmp_root)
        token, self.next_token = self.next_token, self.next_token + 1
        # SIGCHLD stays blocked until the pidfd exists, so a worker that dies at once is not
        # reaped (and its pid freed for reuse) before the pidfd pins it.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        try:
            pid = os.fork()
            if pid == 0:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
                worker.child_main(sock_fd, ctx_fd, int(msg["ctx_len"]), tmpdir, self.opts, msg.get("vars") or {})
                os._exit(0)
            self.children[pid] = (tmpdir, token)
            self.tokens[token] = pid
            pidfd = os.pidfd_open(pid)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        os.close(sock_fd)
        os.close(ctx_fd)
        try:
            wire.send(self.ctl, {"ok": True, "pid": pid, "token": token}, [pidfd])
        finally:
            os.close(pidfd)

    def status(self, token: int) -> None:
        """Reap the worker `token` (the host has just SIGKILLed it) and report how it ended."""
        # With SIGCHLD blocked the handler cannot reap (and drop `token`) between our checks.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        try:
            deadline = time.monotonic() + 2.0
            while token not in self.statuses and token in self.tokens and time.monotonic() < deadline:
                self._reap(self.tokens[token])
                if token not in self.statuses:
                    time.sleep(0.002)
            if token not in self.statuses and token in self.tokens:
                pid = self.tokens[token]
                os.kill(pid, signal.SIGKILL)
                self._reap(pid, block=True)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        st = self.statuses.pop(token, None)
        out: dict[str, Any] = {"ok": True, "token": token}
        if st is not None:
            out["signal"] = os.WTERMSIG(st) if os.WIFSIGNALED(st) else None
            out["exit_code"] = os.WEXITSTATUS(st) if os.WIFEXITED(st) else None
        wire.send(self.ctl, out)

    def shutdown(self) -> None:
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in list(self.children):
            self._reap(pid, block=True)
        shutil.rmtree(self.tmp_root, ignore_errors=True)

    def serve(self) -> None:
        wire.send(self.ctl, {"ok": True, "op": "ready", "pid": os.getpid()})
        while True:
            try:
                msg, fds = wire.recv(self.ctl, 1 << 20, want_fds=True)
            except (wire.WireError, OSError):
                break  # the host went away: take every worker with us
            op = msg.get("op")
            if op == "fork":
                self.fork(msg, fds)
            elif op == "status":
                self.status(int(msg["token"]))
            elif op == "stop":
                break
        self.shutdown()


def _preload(active: list[str]) -> None:
    """Import the layer libraries before any fork: workers cannot exec ldconfig or read new paths later."""
    if "seccomp" in active:
        try:
            import pyseccomp  # noqa: F401 - loaded before fork, used by the workers
        except Exception:  # noqa: BLE001 - the worker reports the layer as not applied
            pass
    if "landlock" in active:
        try:
            from landlock.plumbing import landlock_abi_version

            landlock_abi_version()
        except Exception:  # noqa: BLE001 - the worker reports the layer as not applied
            pass


def main() -> None:
    ctl_fd, opts = int(sys.argv[1]), json.loads(sys.argv[2])
    _preload(opts["layers"])
    ctl = socket.socket(fileno=ctl_fd)
    Zygote(ctl, opts).serve()
    os._exit(0)
