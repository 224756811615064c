"""Processes: concurrency, clean shutdown, no orphans, zygote or host death, big contexts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from fathom.config.sandbox import SandboxConfig
from fathom.env_server.sandbox import SandboxError, SandboxPool
from tests.procs import descendants, state
from tests.sandbox_layers import need

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _wait_gone(pids: set[int], limit_s: float = 15.0, reaped: bool = False) -> set[int]:
    """Wait until `pids` have exited (and, with `reaped`, been reaped: no zombies); returns the rest."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        alive = {p for p in pids if os.path.exists(f"/proc/{p}") and (reaped or state(p) != "Z")}
        if not alive:
            return set()
        time.sleep(0.05)
    return alive


def test_concurrent_episodes_from_threads(pool):
    errors: list[str] = []

    def one(i: int) -> None:
        try:
            ep = pool.new_episode(f"doc {i}", llm_handler=lambda ps: [p[::-1] for p in ps])
            try:
                for k in range(5):
                    res = ep.run(f"x = {k}\nprint(context, x, llm('ab'))")
                    if res.stdout != f"doc {i} {k} ba\n":
                        errors.append(f"{i}/{k}: {res.output()}")
            finally:
                ep.close()
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(f"{i}: {e!r}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_llm_wait_does_not_count_against_the_deadline(pool):
    def slow(prompts):
        time.sleep(pool.cfg.call_timeout_s + 0.5)
        return ["late"] * len(prompts)

    ep = pool.new_episode("", llm_handler=slow)
    try:
        res = ep.run("print(llm('q'))")
        assert res.killed_reason is None and res.stdout == "late\n"
    finally:
        ep.close()


def test_unicode_and_large_context(pool):
    text = "héllo wörld \U0001f600 " * 1_000_000  # ~20 M characters, multi-byte UTF-8
    ep = pool.new_episode(text)
    try:
        res = ep.run("print(len(context), context[:13], context.count('\\U0001f600'))")
        assert res.stdout == f"{len(text)} héllo wörld \U0001f600 1000000\n"
    finally:
        ep.close()


def test_close_leaves_no_processes():
    before = descendants(os.getpid())
    pool = SandboxPool(SandboxConfig(call_timeout_s=2.0))
    eps = [pool.new_episode(str(i)) for i in range(3)]
    eps[0].run("x = 1")
    started = descendants(os.getpid()) - before
    assert len(started) >= 4  # zygote (maybe under bwrap) + 3 workers
    ep_before = descendants(os.getpid())
    extra = pool.new_episode("closed early")
    worker = descendants(os.getpid()) - ep_before
    assert len(worker) == 1
    extra.close()
    assert _wait_gone(worker, reaped=True) == set()  # killed and reaped (no zombie) while the pool lives on
    pool.close()
    pool.close()
    assert _wait_gone(started) == set()
    assert eps[1].run("print(1)").killed_reason == "dead"
    with pytest.raises(SandboxError, match="closed"):
        pool.new_episode("")


def _kill_sandbox_tree(pool: SandboxPool) -> None:
    for pid in descendants(pool._proc.pid):  # the zygote itself, inside bwrap when present
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # killing the namespace's init already took it
    pool._proc.kill()
    pool._proc.wait()


def test_dead_zygote_is_replaced_once_and_its_episodes_report_dead():
    pool = SandboxPool(SandboxConfig(call_timeout_s=2.0))
    try:
        old = pool.new_episode("old")
        old.run("v = 1")
        old_tree = descendants(pool._proc.pid) | {pool._proc.pid}
        _kill_sandbox_tree(pool)
        fresh = pool.new_episode("new")
        assert pool.zygote_restarts == 1
        assert fresh.run("print(context)").stdout == "new\n"
        res = old.run("print(v)")
        assert res.killed_reason is not None and not old.alive
        assert _wait_gone(old_tree) == set()
    finally:
        pool.close()


def test_zygote_that_cannot_restart_is_a_clear_error():
    pool = SandboxPool(SandboxConfig(call_timeout_s=2.0, start_timeout_s=5.0))
    try:
        _kill_sandbox_tree(pool)
        pool._start_zygote = lambda: (_ for _ in ()).throw(SandboxError("sandbox zygote failed to start (test)"))
        with pytest.raises(SandboxError, match="zygote"):
            pool.new_episode("")
    finally:
        pool._finalizer()


_HOST = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    from fathom.env_server.sandbox import SandboxPool
    pool = SandboxPool()
    ep = pool.new_episode("x")
    ep.run("y = 1")
    print(os.getpid(), flush=True)
    time.sleep(600)
    """
)


def test_host_death_takes_zygote_and_workers_down():
    host = subprocess.Popen([sys.executable, "-I", "-c", _HOST, ROOT], stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout is not None
        host.stdout.readline()
        sandbox = descendants(host.pid)
        assert sandbox
        host.send_signal(signal.SIGKILL)
        host.wait()
        assert _wait_gone(sandbox) == set()
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()


def test_close_from_another_thread_ends_a_running_call(pool):
    started = threading.Event()
    ep = pool.new_episode("", llm_handler=lambda ps: started.set() or ["go"])
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("res", ep.run("llm('start')\nwhile True:\n    pass")))
    t.start()
    assert started.wait(30)
    ep.close()
    t.join()
    assert out["res"].killed_reason == "closed" and not ep.alive


def test_oversized_llm_prompt_is_an_error_inside():
    small = SandboxPool(SandboxConfig(call_timeout_s=5.0, max_message_bytes=100_000))
    try:
        ep = small.new_episode("x" * 200_000, llm_handler=lambda ps: ["ok"] * len(ps))
        res = ep.run("try:\n    llm(context)\nexcept ValueError as e:\n    print(e)\nprint(llm(context[:10]))")
        assert "too large to send" in res.stdout and res.stdout.endswith("ok\n") and ep.alive
    finally:
        small.close()


def test_oversized_frame_from_a_worker_is_refused():
    """The host's own cap, for a worker that got past the in-sandbox check."""
    import socket as socketlib
    import struct

    from fathom.env_server.sandbox import wire

    for frame, needle in ((struct.pack(">I", 1 << 30) + b"{}", "exceeds"),
                          (struct.pack(">I", 2) + b"[]", "not a JSON object"),
                          (struct.pack(">I", 3) + b"{x}", "undecodable"),
                          (struct.pack(">I", 9) + b"{}", "closed")):
        a, b = socketlib.socketpair()
        try:
            b.sendall(frame)
            b.shutdown(socketlib.SHUT_WR)
            with pytest.raises(wire.WireError, match=needle):
                wire.recv(a, 1 << 20)
        finally:
            a.close()
            b.close()


def test_huge_final_answer_is_an_error_inside(pool):
    ep = pool.new_episode("")
    try:
        res = ep.run("FINAL('a' * 10_000_000)")
        assert "FINAL answer is 10,000,000 characters" in res.error and res.final_answer is None and ep.alive
    finally:
        ep.close()


def test_cpu_limit_and_crash_are_named():
    small = SandboxPool(SandboxConfig(call_timeout_s=20.0, episode_cpu_s=1))
    try:
        ep = small.new_episode("")
        res = ep.run("while True:\n    pass")
        assert res.killed_reason == "cpu" and "CPU time" in res.error
        ep = small.new_episode("")
        signal.pidfd_send_signal(ep._pidfd, signal.SIGSEGV)  # stands in for a crash of the interpreter
        res = ep.run("print(1)")
        assert res.killed_reason == "crashed" and not ep.alive
    finally:
        small.close()


def test_workers_are_the_oom_killers_first_choice(pool):
    before = descendants(os.getpid())
    ep = pool.new_episode("")
    try:
        ep.run("x = 1")
        new = descendants(os.getpid()) - before
        scores = []
        for pid in new:
            try:
                with open(f"/proc/{pid}/oom_score_adj") as f:
                    scores.append(int(f.read()))
            except OSError:
                continue
        assert 1000 in scores  # the worker; the host keeps its own score
        with open("/proc/self/oom_score_adj") as f:
            assert int(f.read()) < 1000
    finally:
        ep.close()


def test_kills_and_normal_episodes_interleave_without_crosstalk():
    """Kills, closes and new episodes from many threads: every kill hits only its own worker.

    Each kill lands while its worker is known to be running (it signals through llm() first), and
    the deadline is far away, so no run ends by a timeout: every one of the 180 normal runs must
    print exactly its own output, on any machine load.
    """
    pool = SandboxPool(SandboxConfig(call_timeout_s=60.0))
    errors: list[str] = []
    ok = [0]
    lock = threading.Lock()

    def killer(i: int) -> None:
        for _ in range(3):
            running = threading.Event()
            ep = pool.new_episode("", llm_handler=lambda ps: running.set() or ["go"])
            out = {}
            t = threading.Thread(target=lambda: out.setdefault("res", ep.run("llm('x')\nwhile True:\n    pass")))
            t.start()
            if not running.wait(60):
                errors.append(f"killer {i}: its worker never started running")
            ep.close()  # SIGKILL through this worker's pidfd, mid-run
            t.join()
            if out["res"].killed_reason != "closed":
                errors.append(f"killer {i}: {out['res'].killed_reason} {out['res'].error}")

    def worker(i: int) -> None:
        for k in range(10):
            ep = pool.new_episode(f"w{i}")
            try:
                for j in range(3):
                    res = ep.run(f"z = {j}\nprint(context, z)")
                    if res.stdout != f"w{i} {j}\n":
                        errors.append(f"worker {i}/{k}/{j}: {res.killed_reason} {res.output(200)}")
                    else:
                        with lock:
                            ok[0] += 1
            finally:
                ep.close()

    try:
        threads = [threading.Thread(target=killer, args=(i,)) for i in range(4)]
        threads += [threading.Thread(target=worker, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert ok[0] == 6 * 10 * 3
    finally:
        pool.close()


def test_zygote_falls_back_when_bwrap_breaks_unless_required(monkeypatch):
    from fathom.env_server.sandbox import layers

    detected = layers.detect_layers()  # before the breakage: the probe passed, the real start fails
    need(detected, "bwrap")
    real = layers.bwrap_argv
    monkeypatch.setattr(layers, "bwrap_argv", lambda *a: real(*a) + ["--bogus-option"])
    monkeypatch.setattr(layers, "detect_layers", lambda: detected)
    with SandboxPool(SandboxConfig()) as pool:
        assert "bwrap" not in pool.effective_layers
        assert pool.new_episode("ok").run("print(context)").stdout == "ok\n"
    with pytest.raises(SandboxError, match="zygote failed to start"):
        SandboxPool(SandboxConfig(required_layers=["bwrap"]))
