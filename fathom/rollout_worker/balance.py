"""Spreading episodes over several env servers by load: the one with the fewest episodes in flight.

Ties rotate, so equal servers take turns and a burst of creates does not pile onto the first.
Thread-safe: TRL's rollout loop creates and finishes sessions from a pool of threads.
"""

from __future__ import annotations

import threading


class LeastInFlight:
    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError("LeastInFlight needs at least one server")
        self.in_flight = [0] * n
        self.started = [0] * n
        """Episodes each server was given, for metrics and the spread benchmark."""
        self._next = 0
        self._lock = threading.Lock()

    def acquire(self, exclude: set[int] = frozenset()) -> int | None:
        """Take a slot on the least-loaded server not in `exclude` (ties in turn); None when all are excluded."""
        with self._lock:
            n = len(self.in_flight)
            rotated = [(self._next + k) % n for k in range(n) if (self._next + k) % n not in exclude]
            if not rotated:
                return None
            index = min(rotated, key=lambda i: self.in_flight[i])  # first minimum: ties keep the rotation
            self.in_flight[index] += 1
            self.started[index] += 1
            self._next = (index + 1) % n
            return index

    def release(self, index: int) -> None:
        with self._lock:
            self.in_flight[index] = max(self.in_flight[index] - 1, 0)
