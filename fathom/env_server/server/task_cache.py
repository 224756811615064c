"""Tasks regenerate deterministically from their id, but a 10M-character context takes seconds.

Every generation of a GRPO group runs the same task, so recently used tasks are kept, up to a
total context size, and regenerated only when evicted.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable


class TaskCache:
    def __init__(self, max_chars: int):
        self.max_chars = max_chars
        self._items: OrderedDict[tuple, Any] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: tuple, make: Callable[[], Any]) -> Any:
        with self._lock:
            task = self._items.get(key)
            if task is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return task
        task = make()  # outside the lock: generating one task must not block lookups of others
        size = len(task.context)
        with self._lock:
            self.misses += 1
            if key not in self._items and size <= self.max_chars:
                self._items[key] = task
                self._chars += size
                while self._chars > self.max_chars:
                    _, old = self._items.popitem(last=False)
                    self._chars -= len(old.context)
        return task
