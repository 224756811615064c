"""Haystack text: the standard library's own sources and docstrings, or a synthetic fallback.

The corpus is built once per process and cached, because every generator slices it and a
10 M-character task must be generated in a few seconds. Only pure-ASCII files are used so a
context is one byte per character in memory and the same file set reads the same everywhere.
Gold answers never depend on this text: facts are inserted into it, and insertion positions
come from a separate random stream (see `fathom.tasks.record.rngs`).
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
import sysconfig
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CORPUS_CAP_CHARS = 8 * 2**20
"""Stop reading stdlib files past this many characters; longer contexts wrap around."""

FILE_HEADER = "### FILE: "
"""Marks the start of each file in the corpus (and of each file in a code_qa repository)."""

HAYSTACK_ENV = "FATHOM_HAYSTACK"
"""Environment variable: `stdlib` (fail if absent), `synthetic`, or `auto` (default: stdlib, else synthetic)."""

# Tests and vendored packages differ most between installs; idle/turtle are GUI demos.
_SKIP_DIRS = {"test", "tests", "site-packages", "dist-packages", "idle_test", "__pycache__", "lib2to3",
              "turtledemo", "ensurepip", "idlelib", "tkinter"}

_SYN_WORDS = (
    "the of and to in is that for it as with was on be by this are or from at which an not have has "
    "value record system process data module function return string list number index buffer stream "
    "object class method state event queue thread signal error result parser token line file path "
    "reads writes keeps holds yields builds checks opens closes sends waits calls maps sorts joins "
    "early late quiet plain simple direct careful strict local remote hidden open final small large"
).split()


@dataclass(frozen=True)
class Corpus:
    text: str
    source: str
    """`stdlib` or `synthetic`."""
    version: str
    """Python version of the stdlib text, or the synthetic generator version."""
    files: int
    sha256: str

    def describe(self) -> dict[str, object]:
        """What the haystack came from, for split manifests."""
        return {"source": self.source, "version": self.version, "files": self.files,
                "chars": len(self.text), "sha256": self.sha256}


def _stdlib_files(root: Path) -> list[Path]:
    out: list[Path] = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in _SKIP_DIRS and not x.startswith((".", "config-")))
        out.extend(Path(d) / f for f in files if f.endswith(".py"))
    return sorted(out, key=lambda p: p.relative_to(root).as_posix())


def _stdlib_corpus(cap: int) -> Corpus | None:
    root = Path(sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        return None
    parts: list[str] = []
    size = nfiles = 0
    for path in _stdlib_files(root):
        try:
            text = path.read_bytes().decode("ascii")
        except (OSError, UnicodeDecodeError):
            continue
        block = f"{FILE_HEADER}lib/{path.relative_to(root).as_posix()}\n{text.replace(chr(13), '')}\n"
        parts.append(block)
        size += len(block)
        nfiles += 1
        if size >= cap:
            break
    if size < 2**20:  # a stripped install (e.g. only .pyc files): too little real text to be a haystack
        return None
    text = "".join(parts)[:cap]
    ver = ".".join(map(str, sys.version_info[:3]))
    return Corpus(text, "stdlib", ver, nfiles, hashlib.sha256(text.encode()).hexdigest())


def _synthetic_corpus(chars: int = 2**21) -> Corpus:
    rng = random.Random("fathom-synthetic-haystack-v1")
    words, lines, size = _SYN_WORDS, [], 0
    while size < chars:
        n = rng.randrange(6, 14)
        line = " ".join(rng.choice(words) for _ in range(n)).capitalize() + "."
        lines.append(line)
        size += len(line) + 1
    text = "\n".join(lines)[:chars]
    return Corpus(text, "synthetic", "v1", 0, hashlib.sha256(text.encode()).hexdigest())


@lru_cache(maxsize=4)
def _corpus(kind: str) -> Corpus:
    if kind == "synthetic":
        return _synthetic_corpus()
    if kind == "auto":  # shares the cached stdlib or synthetic corpus instead of building a third copy
        try:
            return _corpus("stdlib")
        except RuntimeError:
            return _corpus("synthetic")
    found = _stdlib_corpus(CORPUS_CAP_CHARS)
    if found is None:
        raise RuntimeError(
            f"{HAYSTACK_ENV}=stdlib but this Python has no readable standard-library sources under "
            f"{sysconfig.get_paths()['stdlib']!r}; unset {HAYSTACK_ENV} to fall back to the synthetic haystack"
        )
    return found


_default_kind: str | None = None


def set_default(kind: str | None) -> None:
    """Process-wide haystack kind (from `tasks.haystack`); None falls back to $FATHOM_HAYSTACK, then `auto`."""
    global _default_kind
    _default_kind = kind


def corpus(kind: str | None = None) -> Corpus:
    """The cached haystack corpus; `kind` defaults to set_default(), else $FATHOM_HAYSTACK, else `auto`."""
    kind = (kind or _default_kind or os.environ.get(HAYSTACK_ENV) or "auto").strip().lower()
    if kind not in ("auto", "stdlib", "synthetic"):
        raise ValueError(f"haystack kind {kind!r} is unknown ({HAYSTACK_ENV}); use auto, stdlib or synthetic")
    return _corpus(kind)


class _Span:
    """`n` characters of corpus from a random offset, wrapping, kept as corpus ranges (no copy).

    Slicing the cached corpus directly, instead of materialising the filler first, keeps a
    10 M-character context's peak memory near twice its size.
    """

    def __init__(self, rng: random.Random, n: int, kind: str | None):
        self.text = corpus(kind).text
        self.n = n
        self.segs: list[tuple[int, int, int]] = []  # (virtual start, corpus start, corpus end)
        pos, v = rng.randrange(len(self.text)), 0
        while v < n:
            end = min(len(self.text), pos + n - v)
            self.segs.append((v, pos, end))
            v += end - pos
            pos = 0

    def find(self, sub: str, v: int) -> int:
        for vs, cs, ce in self.segs:
            if v < vs + (ce - cs):
                j = self.text.find(sub, cs + max(0, v - vs), ce)
                if j >= 0:
                    return vs + j - cs
        return -1

    def pieces(self, v0: int, v1: int) -> list[str]:
        out = []
        for vs, cs, ce in self.segs:
            a, b = max(v0, vs), min(v1, vs + (ce - cs))
            if a < b:
                out.append(self.text[cs + a - vs:cs + b - vs])
        return out


def filler(rng: random.Random, n: int, kind: str | None = None) -> str:
    """`n` characters of haystack starting at a random offset, wrapping around the corpus."""
    if n <= 0:
        return ""
    span = _Span(rng, n, kind)
    parts = span.pieces(0, n)
    return parts[0] if len(parts) == 1 else "".join(parts)


def weave(rng: random.Random, length: int, inserts: list[str], *, kind: str | None = None,
          boundary: str = "\n") -> tuple[str, list[int]]:
    """Haystack of exactly `length` characters with each insert placed, in order, on its own line(s).

    Insert points are drawn uniformly and snapped forward to the next `boundary` (else the next
    line break) so facts do not split a line of the haystack. Returns the context and the
    character offset of each insert.
    """
    blocks = [f"\n{s}\n" for s in inserts]
    need = length - sum(len(b) for b in blocks)
    if need < 0:
        raise ValueError(f"length {length} is too short for {len(inserts)} inserted facts ({-need} chars over)")
    span = _Span(rng, need, kind) if need else None
    cuts = sorted(rng.randrange(need + 1) for _ in blocks)
    snapped = []
    for c in cuts:
        j = span.find(boundary, c) if span else -1
        if j < 0 and boundary != "\n" and span:
            j = span.find("\n", c)
        snapped.append(c if j < 0 or j >= need else j)
    snapped.sort()
    parts: list[str] = []
    positions, prev, offset = [], 0, 0
    for cut, block in zip(snapped, blocks):
        if span:
            parts += span.pieces(prev, cut)
        offset += cut - prev
        positions.append(offset + 1)
        parts.append(block)
        offset += len(block)
        prev = cut
    if span:
        parts += span.pieces(prev, need)
    return "".join(parts), positions
