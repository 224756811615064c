"""Settings of the sandboxed REPL (owned by the sandbox component)."""

from __future__ import annotations

from fathom.config.base import FathomModel


class SandboxConfig(FathomModel):
    output_cap_chars: int = 2000
    """Characters of REPL output shown to the model; longer output is cut with a visible marker."""

    call_timeout_s: float = 10.0
    """Wall-clock deadline of one `run(code)`; past it the worker is SIGKILLed."""

    required_layers: list[str] = []
    """Isolation layers that must be present or start-up fails closed (e.g. ["restricted", "rlimits", "bwrap"])."""
