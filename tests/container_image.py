"""Build and run the env server's image with podman, from Debian packages only (no container registry here).

1. A base: `debootstrap` a minimal bookworm with python3 (what `python:3.11-slim` would give), `podman import`.
   Cached in podman's storage under `.cache/container/`, tagged by a hash of its recipe, so reruns skip it.
2. The image: fathom/env_server/server/Dockerfile with `--build-arg BASE_IMAGE=<that base>`.

What nested rootful podman needs on these machines (docs/deploy.md has the findings):
- `--runtime runc`: crun 1.8 refuses the hybrid cgroup v1/v2 layout ("cgroups in hybrid mode not supported").
- explicit `--ulimit nofile/nproc`: podman's defaults exceed the hard limits here and the runtime may not raise
  them (no CAP_SYS_RESOURCE), "setrlimit RLIMIT_NOFILE: Operation not permitted".
- the host's CA bundle in the base: outbound TLS (PyPI) goes through an intercepting proxy.
Used by tests/integration/test_container.py and bench/deploy.py.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "container"
DOCKERFILE = ROOT / "fathom" / "env_server" / "server" / "Dockerfile"
SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
PACKAGES = ["python3", "python3-venv", "ca-certificates", "bubblewrap", "libseccomp2"]
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
ULIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]
IMAGE = "localhost/fathom-env:test"


class ContainerError(RuntimeError):
    pass


def missing_tools() -> list[str]:
    return [t for t in ("podman", "debootstrap", "runc") if not shutil.which(t)]


def podman(*args: str, check: bool = True, timeout: float = 1800, **kw) -> subprocess.CompletedProcess:
    cmd = ["podman", "--root", str(CACHE / "storage"), "--runroot", str(CACHE / "run"), "--runtime", "runc", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise ContainerError(f"{' '.join(cmd[:12])} ... exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return p


def base_image() -> str:
    """The debootstrapped base, built once per recipe (packages, suite, host CA bundle)."""
    ca = HOST_CA.read_bytes() if HOST_CA.exists() else b""
    key = hashlib.sha256(repr((SUITE, MIRROR, PACKAGES)).encode() + ca).hexdigest()[:12]
    tag = f"localhost/fathom-test-base:{key}"
    if podman("image", "exists", tag, check=False).returncode == 0:
        return tag
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        rootfs = Path(tmp) / "rootfs"
        p = subprocess.run(["nice", "-n", "5", "debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
                            SUITE, str(rootfs), MIRROR], capture_output=True, text=True, timeout=1800)
        if p.returncode != 0:
            raise ContainerError(f"debootstrap failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
                     "usr/share/locale", "usr/share/info"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        if ca:
            (rootfs / "etc/ssl/certs/ca-certificates.crt").write_bytes(ca)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        changes = ["--change", "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
                   "--change", "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "--change", 'CMD ["python3"]']
        podman("import", *changes, "-", tag, stdin=tar.stdout)
        tar.wait()
    return tag


def build_image(tag: str = IMAGE) -> dict:
    """Base (cached) then the image; returns the seconds each took and the image's size in bytes."""
    CACHE.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    base = base_image()
    t1 = time.monotonic()
    # --network host: the build's pip reaches PyPI like the host does. Layers cache in the same storage.
    podman("build", "--network", "host", *ULIMITS, "--build-arg", f"BASE_IMAGE={base}", "-f", str(DOCKERFILE),
           "-t", tag, str(ROOT))
    t2 = time.monotonic()
    size = int(podman("image", "inspect", tag, "--format", "{{.Size}}").stdout.strip())
    return {"base": base, "base_s": t1 - t0, "build_s": t2 - t1, "size_bytes": size}


TOKEN = "container-test-token"
"""The shared token the container's env server requires: it binds past loopback, which it refuses without one."""


def run_container(name: str, port: int, tag: str = IMAGE, extra: list[str] | None = None) -> None:
    """Start the image's default command on host `port` (host network: no port forwarding needed)."""
    podman("rm", "-f", name, check=False)
    podman("run", "-d", "--name", name, "--network", "host", *ULIMITS, "--env", f"FATHOM_SHARED_TOKEN={TOKEN}",
           *(extra or []), tag,
           "fathom", "env", "serve", "-c", "configs/container.toml", "--env_server.port", str(port))


def stop_container(name: str) -> str:
    """Stop and remove it; returns its log."""
    log = podman("logs", name, check=False)
    podman("rm", "-f", "-t", "2", name, check=False)
    return log.stdout + log.stderr


def exec_in(name: str, *argv: str, env_extra: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    envs = [a for k, v in (env_extra or {}).items() for a in ("--env", f"{k}={v}")]
    return podman("exec", *envs, name, *argv, check=False, timeout=timeout)
