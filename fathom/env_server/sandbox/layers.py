"""Layers 2 and 3: rlimits, no_new_privs, Landlock, seccomp (applied inside a worker) and bubblewrap.

`apply_*` run in a freshly forked worker, after its context is loaded and before any
sandbox code. `detect_layers` probes the machine in a throwaway subprocess so the host
process never restricts itself.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from typing import Any

PR_SET_DUMPABLE = 4
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38

# Syscalls a worker never needs. Default-allow plus this list keeps Python working while
# closing exec, new processes/threads, sockets, tracing, mounts and namespace changes.
DENIED_SYSCALLS = (
    "execve", "execveat", "fork", "vfork", "clone", "clone3", "ptrace", "process_vm_readv",
    "process_vm_writev", "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "socket",
    "socketpair", "connect", "bind", "listen", "accept", "accept4", "kexec_load", "kexec_file_load",
    "init_module", "finit_module", "delete_module", "bpf", "perf_event_open", "keyctl", "add_key",
    "request_key", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "open_by_handle_at", "name_to_handle_at", "swapon", "swapoff", "reboot", "syslog", "acct",
    "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open", "pidfd_getfd",
    "pidfd_send_signal", "kcmp", "move_mount", "open_tree", "fsopen", "fsmount", "fspick",
    "mount_setattr", "personality", "quotactl", "settimeofday", "clock_settime", "iopl", "ioperm",
)

LAYER_HELP = {
    "restricted": "install RestrictedPython (pip install 'restrictedpython==9.0'; it is a project dependency)",
    "rlimits": "needs Linux (the resource module)",
    "no_new_privs": "needs Linux >= 3.5 with prctl(PR_SET_NO_NEW_PRIVS)",
    "landlock": "needs Linux >= 5.13 with Landlock enabled (lsm=landlock) and PyPI `landlock`",
    "seccomp": "needs libseccomp (apt-get install -y libseccomp2) and PyPI `pyseccomp`",
    "bwrap": "install bubblewrap (apt-get install -y bubblewrap) on a kernel/container that allows user namespaces",
}


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def prctl(option: int, arg: int) -> None:
    if _libc().prctl(option, arg, 0, 0, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"prctl({option}, {arg}) failed: {os.strerror(e)}")


def set_parent_death_signal() -> None:
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def apply_rlimits(memory_limit_mb: int, cpu_s: int, fsize_mb: int, nofile: int) -> None:
    # The address-space cap sits above what the worker already maps (interpreter + context),
    # so the setting means "extra memory user code may take".
    with open("/proc/self/statm") as f:
        vsize = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = vsize + memory_limit_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    # Without SIG_IGN an oversized write kills the worker with SIGXFSZ instead of raising.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_mb * 1024 * 1024,) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    # Many workers at their memory limit can still exhaust the machine; the kernel's OOM
    # killer should then take a worker (reported as "memory"), never the host or the engine.
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def apply_no_new_privs() -> None:
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    # Non-dumpable: other processes of the same uid cannot open /proc/<pid>/mem of this one.
    prctl(PR_SET_DUMPABLE, 0)


def apply_landlock(tmpdir: str, read_paths: list[str]) -> None:
    import landlock
    from landlock.plumbing import FSAccess, landlock_abi_version

    rs = landlock.Ruleset()
    read = FSAccess.READ_FILE | FSAccess.READ_DIR
    write = read | FSAccess.WRITE_FILE | FSAccess.REMOVE_DIR | FSAccess.REMOVE_FILE | FSAccess.MAKE_DIR
    write |= FSAccess.MAKE_REG
    if landlock_abi_version() >= 3:
        write |= FSAccess.TRUNCATE
    for p in read_paths:
        if os.path.exists(p):
            rs.allow(p, rules=read)
    rs.allow(tmpdir, rules=write)
    rs.apply()


def apply_seccomp() -> None:
    import pyseccomp

    flt = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    for name in DENIED_SYSCALLS:
        try:
            flt.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
        except (OSError, ValueError, RuntimeError):
            continue  # not a syscall on this architecture
    flt.load()


def python_read_paths() -> list[str]:
    """What a worker may read: the interpreter's stdlib and the venv (lazy codec imports).

    Not the project: the worker has imported all of it before the lockdown, and the
    package holds task manifests that must stay out of reach.
    """
    return sorted(p for p in {sys.base_prefix, sys.prefix} if p)


def bwrap_argv(tmpfs_mb: int, binds: list[str]) -> list[str]:
    """bubblewrap with new user/pid/net/ipc/uts namespaces, read-only binds and a private tmpfs."""
    argv = [
        shutil.which("bwrap") or "bwrap", "--unshare-user", "--unshare-pid", "--unshare-net",
        "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--new-session", "--cap-drop", "ALL",
        "--uid", "65534", "--gid", "65534", "--clearenv", "--setenv", "PATH", "/usr/bin",
        "--proc", "/proc", "--dev", "/dev", "--size", str(tmpfs_mb * 1024 * 1024), "--tmpfs", "/tmp",
        "--chdir", "/tmp",
    ]
    for d in ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d"):
        argv += ["--ro-bind-try", d, d]
    for d in binds:
        argv += ["--ro-bind", d, d]
    return argv


def _bwrap_binds() -> list[str]:
    """The Python install plus only the files the zygote imports: not the rest of the package."""
    sandbox_dir = os.path.dirname(os.path.abspath(__file__))
    env_dir = os.path.dirname(sandbox_dir)
    pkg_dir = os.path.dirname(env_dir)
    return sorted({sys.base_prefix, sys.prefix, sandbox_dir, os.path.join(env_dir, "__init__.py"),
                   os.path.join(pkg_dir, "__init__.py")})


_PROBE = r"""
import json, os, sys
out = {}
def child(fn):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            msg = fn() or "ok"
            os.write(w, json.dumps([True, msg]).encode())
        except BaseException as e:
            os.write(w, json.dumps([False, f"{type(e).__name__}: {e}"]).encode())
        os._exit(0)
    os.close(w)
    data = os.read(r, 65536)
    os.waitpid(pid, 0)
    return json.loads(data) if data else [False, "probe child died"]
sys.path.insert(0, sys.argv[1])
from fathom.env_server.sandbox import layers as L
def rl():
    L.apply_rlimits(256, 5, 1, 64)
    return "RLIMIT_AS, CPU, FSIZE, NOFILE, NPROC, CORE set"
def nnp():
    L.apply_no_new_privs()
    return "PR_SET_NO_NEW_PRIVS and non-dumpable set"
def ll():
    from landlock.plumbing import landlock_abi_version
    v = landlock_abi_version()
    L.apply_landlock("/tmp", [])
    try:
        open("/etc/hostname" if os.path.exists("/etc/hostname") else sys.executable, "rb")
    except PermissionError:
        return f"ABI {v}: reads outside allowed paths denied"
    raise RuntimeError("Landlock ruleset applied but a read outside it succeeded")
def sc():
    L.apply_no_new_privs()
    L.apply_seccomp()
    try:
        os.fork()
    except PermissionError:
        return "fork/exec/socket/ptrace/mount denied"
    os._exit(0)
out["rlimits"] = child(rl)
out["no_new_privs"] = child(nnp)
out["landlock"] = child(ll)
out["seccomp"] = child(sc)
print(json.dumps(out))
"""


def detect_layers() -> dict[str, dict[str, Any]]:
    """Which isolation layers this machine offers: {layer: {"available": bool, "detail": str}}."""
    res: dict[str, dict[str, Any]] = {}
    try:
        import RestrictedPython  # noqa: F401 - importable is what the layer needs
        from importlib.metadata import version

        res["restricted"] = {"available": True, "detail": f"RestrictedPython {version('RestrictedPython')}"}
    except Exception as e:  # noqa: BLE001 - any import failure means the layer is missing
        res["restricted"] = {"available": False, "detail": f"{e}; {LAYER_HELP['restricted']}"}
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        p = subprocess.run([sys.executable, "-I", "-c", _PROBE, pkg_root], capture_output=True, text=True,
                           timeout=60)
        probe = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {}
        err = p.stderr.strip()[-300:]
    except Exception as e:  # noqa: BLE001 - report, never crash doctor
        probe, err = {}, str(e)
    for name in ("rlimits", "no_new_privs", "landlock", "seccomp"):
        ok, detail = probe.get(name, [False, f"probe failed: {err}"])
        res[name] = {"available": bool(ok), "detail": detail if ok else f"{detail}; {LAYER_HELP[name]}"}
    res["bwrap"] = _detect_bwrap()
    return res


def _detect_bwrap() -> dict[str, Any]:
    exe = shutil.which("bwrap")
    if not exe:
        return {"available": False, "detail": f"bwrap not found; {LAYER_HELP['bwrap']}"}
    argv = bwrap_argv(16, _bwrap_binds()) + [sys.executable, "-I", "-c", "print('ok')"]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except Exception as e:  # noqa: BLE001 - report, never crash doctor
        return {"available": False, "detail": f"bwrap failed to run: {e}"}
    if p.returncode != 0 or p.stdout.strip() != "ok":
        return {"available": False, "detail": f"bwrap exited {p.returncode}: {p.stderr.strip()[-300:]}; "
                f"{LAYER_HELP['bwrap']}"}
    ver = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
    return {"available": True, "detail": f"{ver}: user, pid, net, ipc, uts namespaces; read-only binds; tmpfs"}
