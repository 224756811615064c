"""`fathom doctor`: report what this machine offers each component."""

from __future__ import annotations


def doctor() -> None:
    """Report venvs, the vLLM build, prepared models and sandbox isolation layers."""
    from fathom.entrypoints.doctor_checks import run_checks

    run_checks()
