"""Process-wide CPU settings the trainer-side commands make before torch loads: OpenMP's wait policy and the
cores this process (and what it starts) runs on."""

from __future__ import annotations

import os
import sys

from fathom.config.cpus import parse_cpu_list


class PinError(ValueError):
    """The cores asked for are not available to this process; the message names the setting and the cores to pick."""


def passive_omp() -> None:
    """Let idle OpenMP threads sleep instead of spin, unless the user chose (call before torch is imported).

    On 2 cores shared with vLLM, spinning threads starve each other: measured with load average 11-15,
    LoRA fwd+bwd of the embedded model ran at 8-12 tok/s spinning and 31-40 tok/s passive, and the merge +
    unmerge of a weight sync took 12-14 s spinning and 0.5-1.3 s passive.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pin_cpus(spec: str, setting: str = "trainer.cpu_cores") -> list[int] | None:
    """Run this process (and the children it starts) on the cores in `spec`, with one torch thread per core;
    empty: leave it as it is. Call before torch is imported. Raises `PinError` naming `setting` when a core
    is not available here."""
    if not spec:
        return None
    cores = parse_cpu_list(spec)
    try:
        os.sched_setaffinity(0, cores)
    except OSError as e:
        raise PinError(f"{setting} = {spec!r}: cannot run on cores {cores} ({e.strerror}); this machine offers "
                       f"{sorted(os.sched_getaffinity(0))}: pick cores from those") from None
    os.environ["OMP_NUM_THREADS"] = str(len(cores))
    if "torch" in sys.modules:  # already loaded: its thread pool was sized from the old OMP_NUM_THREADS
        sys.modules["torch"].set_num_threads(len(cores))
    return cores
