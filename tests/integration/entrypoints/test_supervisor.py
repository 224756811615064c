"""The main job's supervisor: health waits, dead servers restarted with backoff, repeated deaths and stalls end
the run loudly, and nothing is left running (checked by listing every process in the groups it made)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from fathom.stack.supervisor import LaunchError, Restarts, Supervisor
from tests.ports import free_port

# A server that answers /health and leaves a grandchild (`sleep`) in its process group.
SERVER = """
import http.server, subprocess, sys
child = subprocess.Popen(["sleep", "300"])
open(sys.argv[2], "w").write(str(child.pid))
print("server up", flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _gone(pid: int, within: float = 10.0) -> bool:
    """A killed process takes a moment to exit and be reaped; poll instead of racing it."""
    deadline = time.monotonic() + within
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _start_server(sup: Supervisor, tmp_path: Path, name: str = "policy"):
    port, pidfile = free_port(), tmp_path / f"{name}.grandchild"
    child = sup.serve(name, [sys.executable, "-c", SERVER, str(port), str(pidfile)],
                      f"http://127.0.0.1:{port}/health", timeout_s=30)
    deadline = time.monotonic() + 10
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return child, int(pidfile.read_text())


def test_servers_and_grandchildren_stop_on_exit(tmp_path: Path) -> None:
    with Supervisor(tmp_path / "logs", poll_s=0.05) as sup:
        child, grandchild = _start_server(sup, tmp_path)
        sup.run_stage("stage", [sys.executable, "-c", "print('stage ran')"])
        assert child.alive() and _alive(grandchild)
    assert _gone(child.proc.pid) and _gone(grandchild)
    assert "stage ran" in (tmp_path / "logs" / "stage.log").read_text()
    assert "server up" in (tmp_path / "logs" / "policy.log").read_text()


def test_stop_by_name_stops_that_server_and_its_group_only(tmp_path: Path) -> None:
    """`stop(name)` (tests and benchmarks stop one server mid-run): that child's group goes, the others stay."""
    with Supervisor(tmp_path / "logs", poll_s=0.05) as sup:
        proxy, proxy_grandchild = _start_server(sup, tmp_path, "proxy")
        env, env_grandchild = _start_server(sup, tmp_path, "env")
        assert sup.child("proxy") is proxy
        sup.stop("proxy")
        assert _gone(proxy.proc.pid) and _gone(proxy_grandchild)
        assert env.alive() and _alive(env_grandchild)
        assert [c.name for c in sup.children] == ["env"]
        with pytest.raises(LaunchError, match=r"no child called 'proxy' is running \(running: \['env'\]\)"):
            sup.stop("proxy")
    assert _gone(env.proc.pid) and _gone(env_grandchild)


def test_a_childs_own_environment_adds_to_the_supervisors(tmp_path: Path) -> None:
    show = "import os; print(os.environ['FATHOM_T_SHARED'], os.environ.get('FATHOM_T_OWN', '-'))"
    with Supervisor(tmp_path / "logs", env=os.environ | {"FATHOM_T_SHARED": "shared"}, poll_s=0.05) as sup:
        sup.run_stage("plain", [sys.executable, "-c", show])
        own = sup.spawn("own", [sys.executable, "-c", show], env={"FATHOM_T_OWN": "own"})
        assert own.proc.wait(timeout=30) == 0
    assert (tmp_path / "logs" / "plain.log").read_text().split() == ["shared", "-"]
    assert (tmp_path / "logs" / "own.log").read_text().split() == ["shared", "own"]


def test_what_a_stage_leaves_behind_is_stopped_with_it(tmp_path: Path) -> None:
    # A stage that exits while a child it started ignores SIGTERM (as TRL's rollout child did) leaves no orphan.
    pidfile = tmp_path / "left"
    stage = ("import signal, subprocess, sys\n"
             "p = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
             "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)'])\n"
             f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n")
    with Supervisor(tmp_path / "logs", poll_s=0.05) as sup:
        sup.run_stage("grpo", [sys.executable, "-c", stage])
        assert _gone(int(pidfile.read_text()))


def test_a_server_that_dies_during_a_stage_stops_the_run_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(LaunchError) as err:
        with Supervisor(tmp_path / "logs", poll_s=0.05, restarts=Restarts(limit=0)) as sup:
            child, grandchild = _start_server(sup, tmp_path, "proxy")
            os.kill(child.proc.pid, 9)
            sup.run_stage("grpo", [sys.executable, "-c", "import time; time.sleep(60)"])
    msg = str(err.value)
    assert msg.startswith("proxy died with code -9") and "server up" in msg
    assert _gone(grandchild)


def test_a_failed_stage_names_its_command_and_exit_code(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match=r"(?s)sft stage failed with exit code 3 .*boom"):
        with Supervisor(tmp_path / "logs", poll_s=0.05) as sup:
            sup.run_stage("sft", [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"])


def test_a_server_that_exits_before_health_is_reported(tmp_path: Path) -> None:
    with Supervisor(tmp_path / "logs", poll_s=0.05) as sup:
        with pytest.raises(LaunchError, match=r"(?s)env exited with code 1 before it was healthy.*no such model"):
            sup.serve("env", [sys.executable, "-c", "import sys; print('no such model'); sys.exit(1)"],
                      f"http://127.0.0.1:{free_port()}/health", timeout_s=30)


def _groups_members(pgids: set[int]) -> list[int]:
    """Every live process in one of these process groups (the supervisor makes one per child)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[2]) in pgids:
                out.append(int(d.name))
    return out


def _my_children() -> set[int]:
    kids: set[int] = set()
    for t in Path(f"/proc/{os.getpid()}/task").iterdir():
        kids |= {int(x) for x in (t / "children").read_text().split()}
    return kids


def _wait_for(cond, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_server_replaced_with_new_arguments_leaves_nothing_of_the_old_one(tmp_path: Path) -> None:
    with Supervisor(tmp_path / "logs", poll_s=0.05) as sup:
        old, grandchild = _start_server(sup, tmp_path)
        port = old.health_url.split(":")[-1].split("/")[0]
        pidfile = tmp_path / "again.grandchild"
        new = sup.replace("policy", [sys.executable, "-c", SERVER, port, str(pidfile)], old.health_url, timeout_s=30)
        # the old group (server and grandchild) is gone before the new one binds the same port
        assert _gone(old.proc.pid) and _gone(grandchild) and new.alive()
        assert [c.name for c in sup.children] == ["policy"] and sup.children[0] is new and new.server
        with pytest.raises(LaunchError, match="no server of that name"):
            sup.replace("proxy", new.argv, None, timeout_s=5)
    assert _gone(new.proc.pid)
    log = (tmp_path / "logs" / "policy.log").read_text()
    assert log.splitlines().count("server up") == 2 and "--- fathom launch: stopped, to start again as:" in log


def test_a_replaced_server_whose_port_still_answers_is_not_taken_for_the_new_one(tmp_path: Path) -> None:
    # Something outside the old server's process group keeps answering its health URL after the stop.
    import http.server
    import threading

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a):
            pass

    stray = http.server.HTTPServer(("127.0.0.1", free_port()), Ok)
    threading.Thread(target=stray.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{stray.server_port}/health"
    try:
        with Supervisor(tmp_path / "logs", poll_s=0.05, stop_timeout_s=1.0) as sup:
            old, _ = _start_server(sup, tmp_path)
            with pytest.raises(LaunchError, match="still answers after 1 s"):
                sup.replace("policy", old.argv, url, timeout_s=30)
            assert _gone(old.proc.pid) and sup.children == []  # the old one stopped, no new one started
    finally:
        stray.shutdown()


def test_a_dead_server_is_restarted_with_backoff_and_its_state_reapplied(tmp_path: Path) -> None:
    fast = Restarts(limit=3, backoff_s=0.2, backoff_max_s=1.0, start_timeout_s=30)
    restored: list[int] = []
    with Supervisor(tmp_path / "logs", poll_s=0.05, restarts=fast) as sup:
        child, grandchild = _start_server(sup, tmp_path)
        child.on_restart = lambda c: restored.append(c.proc.pid)
        first = child.proc.pid
        os.kill(first, 9)
        # the stage outlives the restart: training goes on while the server comes back
        sup.run_stage("grpo", [sys.executable, "-c", "import time; time.sleep(3); print('trained')"])
        assert child.alive() and child.proc.pid != first and restored == [child.proc.pid]
        assert _gone(grandchild)  # the dead server's group was killed before the restart
        assert [e.split(";")[0] for e in sup.events] == ["policy died with code -9", "policy is back (pid %d)" % child.proc.pid]
        assert "restarting it in 0.2 s (restart 1 of at most 3" in sup.events[0]
    assert "--- fathom launch: policy died with code -9" in (tmp_path / "logs" / "policy.log").read_text()


def test_a_server_that_keeps_dying_ends_the_run_loudly_with_no_orphans(tmp_path: Path) -> None:
    # Each incarnation starts a grandchild, answers health, then dies on its own.
    flaky = SERVER.replace("print(\"server up\", flush=True)",
                           "print('server up', flush=True); import threading, os; "
                           "threading.Timer(0.5, lambda: os._exit(7)).start()")
    port, pidfile = free_port(), tmp_path / "env.grandchild"
    pgids: set[int] = set()
    grandchildren: set[int] = set()
    before = _my_children()
    with pytest.raises(LaunchError) as err:
        with Supervisor(tmp_path / "logs", poll_s=0.05,
                        restarts=Restarts(limit=2, backoff_s=0.1, start_timeout_s=30)) as sup:
            child = sup.serve("env", [sys.executable, "-c", flaky, str(port), str(pidfile)],
                              f"http://127.0.0.1:{port}/health", timeout_s=30)
            seen = {child.proc.pid}

            def track() -> None:
                seen.add(child.proc.pid)
                if pidfile.exists() and pidfile.read_text():
                    grandchildren.add(int(pidfile.read_text()))

            sup.check_servers = (lambda orig: (lambda: (track(), orig())[1]))(sup.check_servers)
            sup.run_stage("grpo", [sys.executable, "-c", "import time; time.sleep(120)"])
            pgids.update(seen)
    pgids.update(seen)
    msg = str(err.value)
    assert msg.startswith("env died with code 7 after 2 restarts within 3600 s (launch.max_restarts = 2)"), msg
    assert "server up" in msg  # the log's last lines
    assert len(seen) == 3 and grandchildren
    assert _groups_members(pgids) == []  # no server, stage or grandchild of any incarnation is left
    assert all(_gone(g) for g in grandchildren)
    assert _my_children() - before == set()


def test_a_stage_whose_heartbeat_goes_stale_is_stopped_loudly(tmp_path: Path) -> None:
    heartbeat = tmp_path / "metrics.jsonl"
    stuck = "import time; open(%r, 'w').write('step 1'); print('step 1 done', flush=True); time.sleep(120)" % str(heartbeat)
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match=r"(?s)grpo stalled: .*metrics.jsonl not updated for \d+ s \(limit 1.5 s.*step 1 done"):
        with Supervisor(tmp_path / "logs", poll_s=0.05) as sup:
            sup.run_stage("grpo", [sys.executable, "-c", stuck], heartbeat=heartbeat, stall_s=1.5)
    assert time.monotonic() - t0 < 30
    assert sup.children == []


def test_a_restart_hook_that_cannot_restore_state_ends_the_run(tmp_path: Path) -> None:
    def refuse(_c):
        raise RuntimeError("policy version 4 was synced over NCCL and lives only in the trainer")

    with pytest.raises(LaunchError, match=r"(?s)policy restarted, but its state could not be restored: policy version 4"):
        with Supervisor(tmp_path / "logs", poll_s=0.05, restarts=Restarts(backoff_s=0.1)) as sup:
            child, _ = _start_server(sup, tmp_path)
            child.on_restart = refuse
            os.kill(child.proc.pid, 9)
            sup.run_stage("grpo", [sys.executable, "-c", "import time; time.sleep(60)"])
