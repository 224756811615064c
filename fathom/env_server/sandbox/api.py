"""Host side: `SandboxPool` owns the zygote; `EpisodeSandbox` drives one episode's worker.

Contract (the env server relies on it): `run()` blocks, is thread-safe across episodes,
and never raises for anything the sandboxed code does; a killed worker leaves the
episode dead (`alive` False) and later `run()` calls return a result saying so, because
silently restarting would hand the model an empty namespace it did not expect.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import weakref
from typing import Callable

from fathom.config.sandbox import SandboxConfig
from fathom.env_server.sandbox import layers, wire
from fathom.env_server.sandbox.episode import EpisodeSandbox
from fathom.env_server.sandbox.results import RunResult, SandboxError
from fathom.env_server.sandbox.worker import INJECTED

log = logging.getLogger(__name__)
LlmHandler = Callable[[list[str]], list[str]]
__all__ = ["LlmHandler", "RunResult", "SandboxError", "SandboxPool"]


_BOOT = "import sys; sys.path.insert(0, sys.argv.pop(1)); from fathom.env_server.sandbox.zygote import main; main()"
_PKG_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class SandboxPool:
    """Starts the pre-loaded zygote (under bubblewrap when available) and hands out episodes."""

    def __init__(self, cfg: SandboxConfig | None = None) -> None:
        self.cfg = cfg or SandboxConfig()
        self.layers = layers.detect_layers()
        missing = [n for n in self.cfg.required_layers if not self.layers[n]["available"]]
        missing += [n for n in self.cfg.required_layers if n in self.cfg.disabled_layers and n not in missing]
        if missing:
            raise SandboxError(
                "required sandbox layer(s) unavailable: "
                + "; ".join(f"{n}: {self.layers[n]['detail']}" for n in missing)
                + " (or remove them from sandbox.required_layers)"
            )
        self.active = [n for n, v in self.layers.items() if v["available"] and n not in self.cfg.disabled_layers]
        self._lock = threading.Lock()
        self._gen = 0
        self.zygote_restarts = 0
        """How often a dead zygote was replaced (each loses the episodes it served)."""
        self._episodes: weakref.WeakSet[EpisodeSandbox] = weakref.WeakSet()
        self._closed = False
        try:
            self._start_zygote()
        except SandboxError as e:
            if "bwrap" not in self.active or "bwrap" in self.cfg.required_layers:
                raise
            # bwrap passed its probe but cannot host the zygote here: run without it rather than not at all.
            log.warning("sandbox zygote failed under bubblewrap, continuing without that layer: %s", e)
            self.active.remove("bwrap")
            self._start_zygote()
        # One throwaway episode shows which layers a worker really gets on this machine.
        probe = self.new_episode("")
        self.effective_layers = list(probe.layers)
        probe.close()
        lost = [n for n in self.active if n not in self.effective_layers]
        if lost:
            log.warning("sandbox layers detected but not applied in workers: %s", ", ".join(lost))

    def _start_zygote(self) -> None:
        cfg = self.cfg
        use_bwrap = "bwrap" in self.active
        opts = {
            "layers": self.active, "required": cfg.required_layers, "bwrap": use_bwrap,
            "memory_limit_mb": cfg.memory_limit_mb, "episode_cpu_s": cfg.episode_cpu_s,
            "file_size_mb": cfg.file_size_mb, "max_open_files": cfg.max_open_files,
            "read_cap_chars": cfg.read_cap_chars, "recursion_limit": cfg.recursion_limit,
            "max_message_bytes": cfg.max_message_bytes,
        }
        host_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = [sys.executable, "-I", "-c", _BOOT, _PKG_ROOT, str(child_sock.fileno()), json.dumps(opts)]
        if use_bwrap:
            argv = layers.bwrap_argv(cfg.tmpfs_mb, layers._bwrap_binds()) + argv
        # A bare environment: host secrets (tokens, keys) must not be inherited by workers.
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        self._proc = subprocess.Popen(argv, pass_fds=(child_sock.fileno(),), env=env, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        child_sock.close()
        self._ctl = host_sock
        self._ctl.settimeout(cfg.start_timeout_s)
        try:
            msg, _ = wire.recv(self._ctl, 1 << 20)
        except (wire.WireError, OSError) as e:
            err = self._stop_proc()
            raise SandboxError(f"sandbox zygote failed to start ({e}): {err[-2000:]}") from None
        self._ctl.settimeout(None)
        # stderr stays a pipe only until ready; afterwards nothing reads it, so close our end.
        self._proc.stderr.close() if self._proc.stderr else None
        self._finalizer = weakref.finalize(self, _shutdown, self._proc, self._ctl)
        log.info("sandbox zygote ready (layers: %s)", ", ".join(self.active))

    def _stop_proc(self) -> str:
        self._proc.kill()
        try:
            _, err = self._proc.communicate(timeout=10)
        except Exception:  # noqa: BLE001 - killed already; its stderr is a nicety
            err = b""
        return (err or b"").decode(errors="replace")

    def _request(self, msg: dict, fds: list[int] | None = None) -> tuple[dict, list[int], int]:
        """One request to the zygote; returns its reply, any fds, and which zygote generation answered."""
        with self._lock:
            if self._closed:
                raise SandboxError("the sandbox pool is closed; create a new SandboxPool")
            try:
                wire.send(self._ctl, msg, fds)
                return (*wire.recv(self._ctl, 1 << 20, want_fds=True), self._gen)
            except (wire.WireError, OSError) as e:
                raise SandboxError(f"sandbox zygote is gone ({e})") from None

    def _status(self, token: int, gen: int) -> dict:
        """How a worker ended (after the host SIGKILLed it); {} when unknown or its zygote is gone."""
        if gen != self._gen:
            return {}
        try:
            return self._request({"op": "status", "token": token})[0]
        except SandboxError:
            return {}

    def _restart_zygote(self, seen_gen: int) -> None:
        with self._lock:
            if self._closed:
                raise SandboxError("the sandbox pool is closed; create a new SandboxPool")
            if self._gen != seen_gen:
                return  # another thread already restarted it
            log.warning("sandbox zygote died; starting a new one (episodes of the old one are gone)")
            self._finalizer()
            self._start_zygote()
            self._gen += 1
            self.zygote_restarts += 1

    def new_episode(self, context: str, llm_handler: LlmHandler | None = None,
                    variables: dict[str, str] | None = None) -> "EpisodeSandbox":
        """Fork a fresh worker with `context` preloaded as the variable `context`, and each of `variables` (short
        strs, such as the episode's `question`) under its own name."""
        if not isinstance(context, str):
            raise TypeError(f"context must be a str, got {type(context).__name__}")
        variables = _check_variables(variables or {})
        if len(context) > self.cfg.max_context_chars:
            raise ValueError(f"context has {len(context):,} characters, over sandbox.max_context_chars "
                             f"({self.cfg.max_context_chars:,}); raise that setting or shorten the document")
        # The context travels as a memfd the worker maps, not through the socket: 100 MB in ~0.1 s.
        memfd = os.memfd_create("fathom-context", os.MFD_CLOEXEC)
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            _write_context(memfd, context)
            req = {"op": "fork", "ctx_len": os.fstat(memfd).st_size, "vars": variables}
            gen = self._gen
            try:
                msg, fds, gen = self._request(req, [child.fileno(), memfd])
            except SandboxError:
                if self._closed:
                    raise
                # A dead zygote would fail every later episode of a long run: replace it once.
                self._restart_zygote(gen)
                msg, fds, gen = self._request(req, [child.fileno(), memfd])
        except BaseException:
            host.close()
            raise
        finally:
            os.close(memfd)
            child.close()
        if not msg.get("ok") or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            host.close()
            raise SandboxError(f"sandbox zygote could not fork a worker: {msg.get('error', msg)}")
        ep = EpisodeSandbox(self, host, fds[0], int(msg["token"]), gen, llm_handler)
        ep._await_ready(self.cfg.start_timeout_s)
        self._episodes.add(ep)
        return ep

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for ep in list(self._episodes):
            ep.close()
        self._finalizer()

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_CHUNK_CHARS = 8 << 20
_RESERVED = frozenset({"context", *INJECTED})
_MAX_VARIABLE_CHARS = 64 * 1024


def _check_variables(variables: dict[str, str]) -> dict[str, str]:
    """Preloaded variables travel in the fork request, so they must be short strs under plain names."""
    for name, value in variables.items():
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_") or name in _RESERVED:
            raise ValueError(f"sandbox variable name {name!r} must be a plain identifier, not starting with '_' "
                             f"and not one of {sorted(_RESERVED)}")
        if not isinstance(value, str) or len(value) > _MAX_VARIABLE_CHARS:
            raise ValueError(f"sandbox variable {name!r} must be a str of at most {_MAX_VARIABLE_CHARS:,} characters; "
                             "pass long text as the context")
    return dict(variables)


def _write_context(fd: int, context: str) -> None:
    """UTF-8 encode in chunks so a 100 MB context never has a second full copy in the host."""
    for i in range(0, len(context), _CHUNK_CHARS):
        view = memoryview(context[i:i + _CHUNK_CHARS].encode("utf-8", "surrogatepass"))
        while view:
            view = view[os.write(fd, view):]


def _shutdown(proc: subprocess.Popen, ctl: socket.socket) -> None:
    try:
        wire.send(ctl, {"op": "stop"})
    except OSError:
        pass
    ctl.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
