"""Settings of the sandboxed REPL (owned by the sandbox component)."""

from __future__ import annotations

from pydantic import field_validator

from fathom.config.base import FathomModel

SANDBOX_LAYERS = ("restricted", "rlimits", "no_new_privs", "landlock", "seccomp", "bwrap")
"""Isolation layers the sandbox knows, innermost first; `fathom doctor` reports each."""


class SandboxConfig(FathomModel):
    output_cap_chars: int = 2000
    """Characters of REPL output shown to the model; longer output is cut with a visible marker."""

    call_timeout_s: float = 10.0
    """Wall-clock deadline of one `run(code)`; past it the worker is SIGKILLed (time inside llm() is not counted)."""

    required_layers: list[str] = []
    """Isolation layers that must be present or start-up fails closed (e.g. ["restricted", "rlimits", "bwrap"])."""

    disabled_layers: list[str] = []
    """Optional layers not to use even when the machine offers them (`bwrap`, `landlock`, `seccomp`); for debugging."""

    memory_limit_mb: int = 1024
    """Address space a worker may add on top of its preloaded context (RLIMIT_AS); a bigger allocation raises MemoryError."""

    episode_cpu_s: int = 600
    """CPU seconds one episode's worker may use in total (RLIMIT_CPU); past it the kernel kills it."""

    file_size_mb: int = 64
    """Largest file a worker may write in its temporary directory (RLIMIT_FSIZE)."""

    tmpfs_mb: int = 256
    """Size of the tmpfs that holds the workers' temporary directories under bubblewrap."""

    max_open_files: int = 64
    """Open file descriptors per worker (RLIMIT_NOFILE)."""

    max_code_chars: int = 100_000
    """Longest code one `run` accepts; longer code gets an error naming this setting."""

    max_context_chars: int = 128_000_000
    """Longest `context` a new episode accepts."""

    read_cap_chars: int = 200_000
    """Characters of stdout and of stderr the worker keeps and the host reads per call (beyond `output_cap_chars`)."""

    max_message_bytes: int = 64 * 1024 * 1024
    """Largest message the host reads from a worker (an llm_batch of long prompts); larger kills the worker."""

    recursion_limit: int = 1000
    """Python recursion limit inside a worker."""

    start_timeout_s: float = 60.0
    """How long start-up of the zygote or of one episode's worker may take before it counts as failed."""

    @field_validator("required_layers", "disabled_layers")
    @classmethod
    def _known_layers(cls, v: list[str]) -> list[str]:
        bad = [x for x in v if x not in SANDBOX_LAYERS]
        if bad:
            raise ValueError(f"unknown sandbox layer(s) {bad}; known layers: {list(SANDBOX_LAYERS)}")
        return v

    @field_validator("disabled_layers")
    @classmethod
    def _optional_only(cls, v: list[str]) -> list[str]:
        core = [x for x in v if x not in ("bwrap", "landlock", "seccomp")]
        if core:
            raise ValueError(f"layer(s) {core} cannot be disabled; only bwrap, landlock and seccomp are optional")
        return v

    @field_validator("output_cap_chars", "memory_limit_mb", "episode_cpu_s", "max_code_chars", "read_cap_chars")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v <= 0:
            raise ValueError("must be > 0")
        return v

    @field_validator("call_timeout_s")
    @classmethod
    def _positive_timeout(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("must be > 0 seconds")
        return v
