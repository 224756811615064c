"""The OS layers on their own: raw Python (no RestrictedPython) under the same layers a
worker gets must still fail to read host files, open sockets, fork, exec or write outside
its directory. These are what stands if a payload ever gets past layer 1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from fathom.env_server.sandbox import detect_layers
from fathom.env_server.sandbox.layers import _bwrap_binds, bwrap_argv
from tests.sandbox_layers import need, required, shipped_required_layers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LAYERS = detect_layers()


def test_detect_layers_shape():
    assert set(LAYERS) == {"restricted", "rlimits", "no_new_privs", "landlock", "seccomp", "bwrap"}
    for name, info in LAYERS.items():
        assert isinstance(info["available"], bool) and isinstance(info["detail"], str) and info["detail"], name
    assert LAYERS["restricted"]["available"] and LAYERS["rlimits"]["available"]


def test_pool_applies_every_detected_layer(pool):
    offered = {n for n, v in LAYERS.items() if v["available"]}
    assert offered <= set(pool.effective_layers)


def test_test_pool_requires_the_shipped_layers(pool):
    shipped = shipped_required_layers()
    assert shipped and "seccomp" in shipped and "landlock" in shipped  # what configs/*.toml ship
    if required():
        assert pool.cfg.required_layers == shipped
    _need(*shipped, "bwrap")  # set-up installs bubblewrap for real under the switch
    assert set(shipped) <= set(pool.effective_layers)


_ATTACKS = textwrap.dedent(
    """
    import json, os, socket, sys
    sys.path.insert(0, sys.argv[1])
    from fathom.env_server.sandbox import layers as L
    tmp, secret, which = sys.argv[2], sys.argv[3], sys.argv[4].split(",")
    import pyseccomp, landlock  # loaded before the lockdown, as the zygote does
    from landlock.plumbing import landlock_abi_version; landlock_abi_version()
    if "rlimits" in which: L.apply_rlimits(256, 30, 1, 64)
    if "no_new_privs" in which: L.apply_no_new_privs()
    if "landlock" in which: L.apply_landlock(tmp, L.python_read_paths())
    if "seccomp" in which: L.apply_seccomp()
    out = {}
    def attempt(name, fn):
        try:
            fn(); out[name] = "ESCAPED"
        except BaseException as e:
            out[name] = type(e).__name__
    attempt("read_passwd", lambda: open("/etc/passwd").read())
    attempt("read_host_secret", lambda: open(secret).read())
    attempt("read_environ", lambda: open("/proc/1/environ").read())
    attempt("read_package", lambda: open(os.path.join(sys.argv[1], "fathom", "config", "__init__.py")).read())
    attempt("write_outside", lambda: open("/var/tmp/fathom_escape", "w").write("x"))
    attempt("socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    attempt("unix_socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
    attempt("fork", lambda: os.fork() or os._exit(0))
    attempt("memory_bomb", lambda: bytearray(1 << 30))
    attempt("big_file", lambda: open(os.path.join(tmp, "f"), "wb").write(b"x" * (2 << 20)))
    if which != [""]:  # only under the layers: as root with none, these would really happen
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        def errno_of(rc):
            return "ESCAPED" if rc == 0 else os.strerror(ctypes.get_errno())
        out["ptrace"] = errno_of(libc.ptrace(0, 0, None, None))  # PTRACE_TRACEME
        os.mkdir(os.path.join(tmp, "mnt"))
        out["mount"] = errno_of(libc.mount(b"none", os.path.join(tmp, "mnt").encode(), b"tmpfs", 0, None))
    with open(os.path.join(tmp, "ok.txt"), "w") as f:  # its own directory stays usable
        f.write("fine")
    out["own_dir"] = open(os.path.join(tmp, "ok.txt")).read()
    print(json.dumps(out), flush=True)
    try:  # last: a successful exec replaces this process and prints the marker
        os.execv("/bin/echo", ["echo", "EXEC_ESCAPED"])
    except OSError as e:
        print("exec", type(e).__name__)
    """
)


def _raw_attack(tmp_path, layers: list[str]) -> tuple[dict[str, str], str]:
    secret = tmp_path / "host_secret.txt"
    secret.write_text("GOLD")
    work = tmp_path / "work"
    work.mkdir()
    if os.path.exists("/var/tmp/fathom_escape"):
        os.unlink("/var/tmp/fathom_escape")
    p = subprocess.run([sys.executable, "-I", "-c", _ATTACKS, ROOT, str(work), str(secret), ",".join(layers)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    return json.loads(lines[0]), lines[-1]


def _need(*names: str) -> None:
    need(LAYERS, *names)


def test_raw_python_under_worker_layers_is_contained(tmp_path):
    _need("rlimits", "no_new_privs", "landlock", "seccomp")
    out, last = _raw_attack(tmp_path, ["rlimits", "no_new_privs", "landlock", "seccomp"])
    assert last == "exec PermissionError"
    assert out["ptrace"] == out["mount"] == os.strerror(1)  # EPERM from seccomp
    assert out.pop("own_dir") == "fine"
    assert all(v != "ESCAPED" for v in out.values()), out
    assert not os.path.exists("/var/tmp/fathom_escape")


def test_raw_python_without_layers_is_not_contained(tmp_path):
    """The control: the same attacks succeed with no layers, so the test above can fail."""
    out, last = _raw_attack(tmp_path, [])
    assert last == "EXEC_ESCAPED"
    assert out["read_passwd"] == "ESCAPED" and out["read_host_secret"] == "ESCAPED" and out["fork"] == "ESCAPED"
    assert out["read_package"] == "ESCAPED"
    os.unlink("/var/tmp/fathom_escape") if os.path.exists("/var/tmp/fathom_escape") else None


_IN_BWRAP = textwrap.dedent(
    """
    import json, os, socket, sys
    out = {"passwd": os.path.exists("/etc/passwd"), "host_tmp_file": os.path.exists(sys.argv[1]),
           "package_rest": os.path.exists(sys.argv[3]),
           "root_home": os.path.exists("/root/.bashrc"), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", int(sys.argv[2]))); out["connect"] = "ESCAPED"
    except OSError as e:
        out["connect"] = type(e).__name__
    try:
        open("/usr/fathom_escape", "w"); out["write_usr"] = "ESCAPED"
    except OSError as e:
        out["write_usr"] = type(e).__name__
    print(json.dumps(out))
    """
)


def test_bwrap_hides_host_files_network_and_processes(tmp_path):
    _need("bwrap")
    marker = tmp_path / "host_only.txt"
    marker.write_text("x")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    try:
        argv = bwrap_argv(16, _bwrap_binds()) + [sys.executable, "-I", "-c", _IN_BWRAP, str(marker),
                                                 str(srv.getsockname()[1]),
                                                 os.path.join(ROOT, "fathom", "tasks", "__init__.py")]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    finally:
        srv.close()
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["passwd"] is False and out["host_tmp_file"] is False and out["root_home"] is False
    assert out["package_rest"] is False and os.path.exists(os.path.join(ROOT, "fathom", "tasks", "__init__.py"))
    assert out["connect"] != "ESCAPED" and out["write_usr"] != "ESCAPED"
    assert os.getpid() not in out["pids"] and max(out["pids"]) < 10


def test_a_missing_layer_fails_under_the_switch_and_skips_without(monkeypatch):
    from tests.sandbox_layers import SWITCH

    gone = {"bwrap": {"available": False, "detail": "bwrap: not found"}}
    monkeypatch.setenv(SWITCH, "1")
    with pytest.raises(pytest.fail.Exception, match="requires them"):
        need(gone, "bwrap")
    monkeypatch.delenv(SWITCH)
    with pytest.raises(pytest.skip.Exception, match="not available here"):
        need(gone, "bwrap")
