"""Start the serving stack from one config: vLLM (policy server), capture proxy, env server.

Used by `fathom eval --start` and `fathom eval watch --start`, so a job can evaluate with one
command. The proxy and env server run as `fathom` subprocesses given the same config file and
overrides; each runs in its own process group and is stopped group-wide, vLLM included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from fathom.config import FathomConfig


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StackError(RuntimeError):
    """A server of the stack did not come up; the message names it and holds its log tail."""


class _Proc:
    def __init__(self, name: str, argv: list[str], log: Path, health: str):
        self.name, self.log, self.health = name, log, health
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as fh:
            self.p = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                      env=os.environ | {"PYTHONUNBUFFERED": "1"})

    def wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.p.poll() is not None:
                raise StackError(f"{self.name} exited with code {self.p.returncode} (log {self.log}):\n{self.tail()}")
            try:
                if httpx.get(self.health, timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise StackError(f"{self.name} did not answer {self.health} within {timeout_s:.0f} s (log {self.log}):\n{self.tail()}")

    def tail(self) -> str:
        try:
            return "".join(self.log.read_text(errors="replace").splitlines(keepends=True)[-30:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.p.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.p.pid, sig)
                self.p.wait(timeout=wait)
                return
            except ProcessLookupError:
                return
            except subprocess.TimeoutExpired:
                continue


class Stack:
    """`with Stack(cfg, config_path, overrides):` vLLM + proxy + env server; URLs as attributes."""

    def __init__(self, cfg: FathomConfig, config_path: str, overrides: list[str], *, start_policy: bool = True):
        self.cfg, self.config_path, self.overrides, self.start_policy = cfg, config_path, list(overrides), start_policy
        ps, pc, es = cfg.policy_server, cfg.capture_proxy, cfg.env_server
        self.policy_url = pc.upstream_url or f"http://{ps.host}:{ps.port}"
        self.proxy_url = es.proxy_url or f"http://{pc.host}:{pc.port}"
        self.env_url = f"http://{es.host}:{es.port}"
        self.server = None
        self.procs: list[_Proc] = []

    def __enter__(self) -> "Stack":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        logs = self.cfg.run_dir / "logs"
        if self.start_policy:
            from fathom.entrypoints.policy_cmd import start_policy_server

            self.server = start_policy_server(self.cfg, quiet=True)
        cli = [sys.executable, "-m", "fathom.entrypoints.cli"]
        tail = ["--config", self.config_path, *self.overrides]
        self.procs.append(_Proc("capture proxy", cli + ["proxy", "serve", *tail], logs / "proxy.log",
                                f"{self.proxy_url}/healthz"))
        self.procs.append(_Proc("env server", cli + ["env", "serve", "--log-level", "warning", *tail], logs / "env.log",
                                f"{self.env_url}/health"))
        for p in self.procs:
            p.wait(120.0)

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()
        self.procs = []
        if self.server is not None:
            self.server.stop()
            self.server = None
