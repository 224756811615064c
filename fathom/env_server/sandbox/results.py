"""What the sandbox hands back: `RunResult` and `SandboxError`, shared by the pool (api.py) and episodes (episode.py)."""

from __future__ import annotations

from dataclasses import dataclass


class SandboxError(RuntimeError):
    """The sandbox cannot start or serve (missing layer, zygote died); the message says what to do."""


@dataclass
class RunResult:
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    truncated: bool = False
    duration_ms: float = 0.0
    killed_reason: str | None = None
    """None, or why the worker was killed: timeout, memory, cpu, crashed, protocol; `dead` when the episode was
    already killed or closed, `closed` when close() came while this call ran."""
    final_answer: str | None = None
    """Set when this call invoked FINAL(x) / FINAL_VAR(name): the answer as a string."""
    llm_calls: int = 0
    """Prompts sent to the llm handler during this call."""
    output_cap: int | None = None
    """The cap `output()` applies when given none (sandbox.output_cap_chars of the pool)."""

    def output(self, cap: int | None = None) -> str:
        """stdout + stderr + error as the model should see it, cut at `cap` with a visible marker."""
        cap = self.output_cap if cap is None else cap
        parts = [p for p in (self.stdout, self.stderr, self.error) if p]
        text = "\n".join(p.rstrip("\n") for p in parts)
        if cap is not None and len(text) > cap:
            return text[:cap] + f"\n[... output truncated: {len(text) - cap} more characters not shown]"
        if self.truncated:
            text += "\n[... output truncated by the sandbox]"
        return text


def valid_utf8(text: str) -> str:
    """`text` with every code point UTF-8 cannot encode (lone surrogates) replaced by U+FFFD.

    Sandboxed code can print `chr(0xD800)`; such a str reaches the host intact (the wire allows
    surrogates) but cannot be serialized as JSON or tokenized, so it would break the step that
    returns it. A correctly paired surrogate couple becomes the character it encodes.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
