"""`EpisodeSandbox`: one episode's worker, driven over its socket with a wall-clock deadline."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from typing import Any, Callable, Protocol

from fathom.config.sandbox import SandboxConfig
from fathom.env_server.sandbox import wire
from fathom.env_server.sandbox.results import RunResult, SandboxError, valid_utf8
from fathom.env_server.sandbox.worker import EXIT_MEMORY


class PoolLink(Protocol):
    """What an episode needs from its pool (api.SandboxPool), named here so episode.py never imports api.py."""

    cfg: SandboxConfig

    def _status(self, token: int, gen: int) -> dict: ...


class _Deadline(Exception):
    pass


class EpisodeSandbox:
    """A worker forked for one episode; variables persist across `run` calls until `close`."""

    def __init__(self, pool: PoolLink, sock: socket.socket, pidfd: int, token: int, gen: int,
                 llm_handler: Callable[[list[str]], list[str]] | None) -> None:
        self._pool, self._sock, self._pidfd = pool, sock, pidfd
        self._token, self._gen = token, gen  # the zygote's name for this worker, and which zygote
        self._llm = llm_handler
        self._lock = threading.Lock()  # one run at a time
        self._fd_lock = threading.Lock()  # pidfd use vs. close: a reused fd number must never be signalled
        self._closed = False
        self._dead_reason: str | None = None
        self.final_answer: str | None = None
        self.layers: list[str] = []

    @property
    def alive(self) -> bool:
        return not self._closed and self._dead_reason is None

    # --- start-up -------------------------------------------------------------------------
    def _await_ready(self, timeout_s: float) -> None:
        try:
            msg = self._recv(time.monotonic() + timeout_s)
        except (_Deadline, wire.WireError, OSError) as e:
            reason = self._kill_and_reason("timeout" if isinstance(e, _Deadline) else None)
            self.close()
            raise SandboxError(f"sandbox worker did not start ({reason}): {e}") from None
        if msg.get("op") != "ready":
            self.close()
            raise SandboxError(f"sandbox worker failed to start: {msg.get('error', msg)}")
        self.layers = list(msg.get("layers", []))
        missing = [n for n in self._pool.cfg.required_layers if n not in self.layers]
        if missing:
            self.close()
            raise SandboxError(f"sandbox worker started without required layer(s) {missing}; "
                               "see `fathom doctor`")

    # --- framing with a deadline ----------------------------------------------------------------
    def _recv(self, deadline: float) -> dict[str, Any]:
        try:
            msg, _ = wire.recv(self._sock, self._pool.cfg.max_message_bytes, deadline=deadline)
        except socket.timeout:
            raise _Deadline() from None
        finally:
            self._sock.settimeout(None)
        return msg

    def run(self, code: str) -> RunResult:
        """Run `code` in the episode's namespace; never raises for what the code does."""
        t0 = time.monotonic()
        with self._lock:
            res = self._run_locked(code, t0)
        res.duration_ms = (time.monotonic() - t0) * 1000.0
        res.output_cap = self._pool.cfg.output_cap_chars
        if res.final_answer is not None:
            self.final_answer = res.final_answer
        return res

    def _run_locked(self, code: str, t0: float) -> RunResult:
        cfg = self._pool.cfg
        if self._closed:
            return RunResult(error="this episode's sandbox is closed; start a new episode", killed_reason="dead")
        if self._dead_reason is not None:
            return RunResult(error=f"this episode's sandbox worker was killed earlier ({self._dead_reason}); "
                                   "its variables are gone", killed_reason="dead")
        if not isinstance(code, str):
            return RunResult(error=f"code must be a str, got {type(code).__name__}")
        if len(code) > cfg.max_code_chars:
            return RunResult(error=f"code is {len(code):,} characters, over the {cfg.max_code_chars:,}-character "
                                   "limit (sandbox.max_code_chars); send shorter code")
        if "\x00" in code:
            return RunResult(error=f"code contains a null byte (\\x00) at offset {code.index(chr(0))}; remove it")
        deadline = t0 + cfg.call_timeout_s
        try:
            wire.send(self._sock, {"op": "run", "code": code})
            while True:
                msg = self._recv(deadline)
                op = msg.get("op")
                if op == "llm":
                    started = time.monotonic()
                    self._answer_llm(msg)
                    deadline += time.monotonic() - started  # waiting on the model is not the code's time
                elif op == "done":
                    return _result_from(msg, cfg.read_cap_chars)
                else:
                    raise wire.WireError(f"unexpected message {op!r}")
        except _Deadline:
            reason = self._kill_and_reason("timeout")
            return RunResult(error=f"killed: the code ran past the {cfg.call_timeout_s:g} s deadline "
                                   "(sandbox.call_timeout_s); the episode's variables are gone",
                             killed_reason=reason)
        except (wire.WireError, OSError) as e:
            if self._closed:
                return RunResult(error="this episode was closed while its code ran", killed_reason="closed")
            protocol = isinstance(e, wire.WireError) and any(
                w in str(e) for w in ("exceeds", "unexpected", "undecodable", "not a JSON"))
            reason = self._kill_and_reason("protocol" if protocol else None)
            return RunResult(error=f"killed: the sandbox worker {_describe(reason)}; the episode's variables "
                                   "are gone", killed_reason=reason)

    def _answer_llm(self, msg: dict[str, Any]) -> None:
        prompts = msg.get("prompts")
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise wire.WireError("unexpected llm request shape")
        if self._llm is None:
            reply = {"ok": False, "error": "llm() is not available in this episode (no model is attached)"}
        else:
            try:
                results = self._llm([valid_utf8(p) for p in prompts])
                if not isinstance(results, list) or len(results) != len(prompts):
                    raise RuntimeError(f"handler returned {type(results).__name__} of the wrong length")
                reply = {"ok": True, "results": [str(r) for r in results]}
            except Exception as e:  # noqa: BLE001 - the sandbox code sees the failure, the episode goes on
                reply = {"ok": False, "error": f"llm() failed: {type(e).__name__}: {e}"}
        wire.send(self._sock, reply)

    # --- ending -------------------------------------------------------------------------------
    def _kill_and_reason(self, reason: str | None) -> str:
        """SIGKILL the worker, reap it through the zygote and name why it ended."""
        self._signal_kill()
        status = self._pool._status(self._token, self._gen)
        if reason is None:
            sig, code = status.get("signal"), status.get("exit_code")
            if code == EXIT_MEMORY:
                reason = "memory"
            elif sig == signal.SIGXCPU:
                reason = "cpu"
            elif sig == signal.SIGKILL:
                reason = "memory"  # SIGKILL we did not send: the kernel's OOM killer or the CPU hard limit
            else:
                reason = "crashed"
        self._dead_reason = reason
        self._close_fds()
        return reason

    def _signal_kill(self) -> None:
        with self._fd_lock:
            if self._pidfd >= 0:
                try:
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def _close_fds(self) -> None:
        with self._fd_lock:
            if self._pidfd >= 0:
                os.close(self._pidfd)
                self._pidfd = -1
            self._sock.close()

    def close(self) -> None:
        """End the episode: kill and reap its worker. Idempotent; safe while another thread is in `run`."""
        with self._fd_lock:
            if self._closed:
                return
            self._closed = True
        # Kill first, so a run in flight ends now instead of at its deadline. The zygote reaps
        # the worker on SIGCHLD; no round trip here, so close() costs microseconds.
        self._signal_kill()
        with self._lock:
            self._close_fds()

    def __del__(self) -> None:
        # An episode dropped without close(): free the fds; the worker sees EOF and exits.
        try:
            if not self._closed:
                self._signal_kill()
                self._close_fds()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __enter__(self) -> "EpisodeSandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _describe(reason: str) -> str:
    return {
        "memory": "ran out of memory", "cpu": "used up its CPU time (sandbox.episode_cpu_s)",
        "protocol": "sent an oversized or malformed message", "crashed": "crashed",
    }.get(reason, reason)


def _result_from(msg: dict[str, Any], cap: int) -> RunResult:
    # Every text the worker returns is made valid UTF-8 here, the one place results enter the host.
    def text(key: str) -> str | None:
        v = msg.get(key)
        return valid_utf8(v[:cap]) if isinstance(v, str) else None

    calls = msg.get("llm_calls")
    return RunResult(
        stdout=text("stdout") or "", stderr=text("stderr") or "", error=text("error"),
        truncated=bool(msg.get("truncated")), final_answer=text("final_answer"),
        llm_calls=calls if isinstance(calls, int) else 0,
    )
