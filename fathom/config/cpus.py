"""CPU lists in vLLM's `VLLM_CPU_OMP_THREADS_BIND` syntax ("0", "2-5", "0,2-3"), shared by the policy server and
the trainer so the two can be given disjoint cores."""

from __future__ import annotations

import re

_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def parse_cpu_list(spec: str) -> list[int]:
    """"0,2-4" -> [0, 2, 3, 4]; raises ValueError naming the spec on anything else."""
    if not _LIST.match(spec):
        raise ValueError(f"CPU list {spec!r} is malformed; write core ids and ranges like '1' or '0,2-3'")
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise ValueError(f"CPU list {spec!r}: range {part!r} runs backwards; write it low-high")
        out.extend(range(a, b + 1))
    return sorted(set(out))


def checked_cpu_spec(v: object, keywords: tuple[str, ...] = ()) -> object:
    """A config field's value, checked before pydantic types it: an int (`--trainer.cpu_cores 1` parses as TOML)
    becomes its string; any other string than `keywords` must parse as a CPU list."""
    if isinstance(v, int) and not isinstance(v, bool):
        v = str(v)
    if isinstance(v, str) and v not in keywords:
        parse_cpu_list(v)
    return v
