"""SIGTERM unwinds like Ctrl-C, so `finally` blocks and context managers stop the servers a process started.

Python's default SIGTERM ends the process at once: no `finally` runs, and the servers it started (each in its
own session, so a terminal's Ctrl-C does not reach them twice) keep running. A job runner, `timeout`, or CI
stops a command with SIGTERM. Raising KeyboardInterrupt instead lets the code that owns each child stop it.
"""

from __future__ import annotations

import signal
import threading
from typing import Any


def _raise_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def sigterm_unwinds() -> Any:
    """From now on SIGTERM raises KeyboardInterrupt in the main thread. Returns the handler it replaced.

    Only the main thread may set signal handlers; elsewhere this does nothing and returns None.
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _raise_interrupt)
