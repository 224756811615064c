"""Failure text for the page: every failure it meets reaches it with a message."""

from __future__ import annotations


def error_text(e: BaseException) -> str:
    """`str(e)`, or the exception's type where that is empty (`TimeoutError()`, `CancelledError()`, a bare
    `AssertionError`): the page and the console never show a blank message. A `KeyError`'s text is only the key,
    so it keeps its type too."""
    text = str(e).strip()
    name = type(e).__name__
    if not text:
        return f"{name} (no message)"
    return f"{name}: {text}" if isinstance(e, KeyError) else text
