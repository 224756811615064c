"""Helpers shared by entry points: config loading with overrides, error exits."""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, NoReturn

import typer

from fathom.config import ConfigError, FathomConfig, load_config
from fathom.config.cpus import parse_cpu_list
from fathom.config.security import SHARED_TOKEN_ENV

CONFIG_OPTION = typer.Option("configs/smoke.toml", "--config", "-c", help="TOML config file under configs/.")

# Commands that take config accept `--section.key value` overrides after their own options.
OVERRIDE_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True}


def passive_omp() -> None:
    """Let idle OpenMP threads sleep instead of spin, unless the user chose (call before torch is imported).

    On 2 cores shared with vLLM, spinning threads starve each other: measured with load average 11-15,
    LoRA fwd+bwd of the embedded model ran at 8-12 tok/s spinning and 31-40 tok/s passive, and the merge +
    unmerge of a weight sync took 12-14 s spinning and 0.5-1.3 s passive.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pin_cpus(spec: str, setting: str = "trainer.cpu_cores") -> list[int] | None:
    """Run this process (and the children it starts) on the cores in `spec`, with one torch thread per core;
    empty: leave it as it is. Call before torch is imported. Exits with a message naming `setting` when a core
    is not available here."""
    if not spec:
        return None
    cores = parse_cpu_list(spec)
    try:
        os.sched_setaffinity(0, cores)
    except OSError as e:
        die(f"{setting} = {spec!r}: cannot run on cores {cores} ({e.strerror}); this machine offers "
            f"{sorted(os.sched_getaffinity(0))}: pick cores from those")
    os.environ["OMP_NUM_THREADS"] = str(len(cores))
    if "torch" in sys.modules:  # already loaded: its thread pool was sized from the old OMP_NUM_THREADS
        sys.modules["torch"].set_num_threads(len(cores))
    return cores


def die(msg: str, code: int = 2) -> NoReturn:
    typer.secho(f"error: {msg}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def config_from(ctx: typer.Context, config: str) -> FathomConfig:
    """Load `config` with the extra CLI args as dotted overrides; exit with the message on error."""
    try:
        cfg = load_config(config, list(ctx.args))
    except ConfigError as e:
        die(str(e))
    token = cfg.token()
    if token:  # every fathom client, in this process and its children, reads the token from here
        os.environ[SHARED_TOKEN_ENV] = token
    return cfg


def progress_line(console: Any, what: str, done: int, total: int, info: str = "") -> None:
    """A plain `what done/total info` line about every 5% of `total`, only where `console` is no terminal.

    Without a terminal (`make demo > log`, HF Jobs logs) rich draws its bar once, when it stops, so a
    stage of many minutes would show nothing until it ended."""
    if console.is_terminal or total <= 0:
        return
    if done % max(1, total // 20) == 0 or done == total:
        console.print(f"{what} {done}/{total} {info}".rstrip(), highlight=False, soft_wrap=True)


def eprint(*args: object) -> None:
    print(*args, file=sys.stderr)


@contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """Run an ASGI app with uvicorn on a free loopback port; yields its base URL and stops it on exit."""
    import socket

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("an in-process server failed to start (see the log above)")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
