"""One episode as the page sees it: the harness's event hook renders the tree, the page's handler streams it.

The hook runs on the episode's event loop and only renders and enqueues (the harness waits on it); the
handler runs in one of Gradio's worker threads, drains the queue and yields the newest tree, so a burst of
events costs the browser one update.
"""

from __future__ import annotations

import queue
import re
import time
from typing import Any, Callable, Iterator

from fathom.protocol import TurnStat
from fathom.tasks import Gold, Task, TaskMetadata
from fathom.tasks.record import CHARS_PER_TOKEN
from fathom.ui.tree import render_tree

EXAMPLE_TASKS = ("needle-16k-s1000000", "kv_chain-16k-s1000001", "aggregate-8k-s1000002", "pairs-8k-s1000003",
                 "code_qa-16k-s1000004", "needle-256k-s1000005")
"""Test-split tasks the page offers as examples (`Load example`): one per family, plus one past a small window."""

IMPORTED_EXAMPLES = 3
"""Rows offered from each imported eval-role source (tasks.sources) that is in the task store."""


def example_tasks(tasks_cfg: Any = None) -> list[str]:
    """The picker's ids: the built-in examples, then the first rows of each imported split with the eval role."""
    from fathom.tasks import store

    out = list(EXAMPLE_TASKS)
    for src in getattr(tasks_cfg, "sources", []):
        if "eval" in src.roles and store.has(src.name):
            out += store.load_split(src.name)[:IMPORTED_EXAMPLES]
    return out


CUSTOM_TOKEN_BUDGET = 4000
"""The token budget of a question scored against an answer typed into the page (as for external task files)."""


class LiveEpisode:
    def __init__(self) -> None:
        self.turns: list[TurnStat] = []
        """The root loop's turns; the harness appends to and updates them in place."""
        self.first_turn_at: float | None = None
        """time.time() when the first root turn reached the hook (the latency benchmark's start of the UI's part)."""
        self._q: queue.SimpleQueue[str] = queue.SimpleQueue()

    def on_event(self, kind: str, node: Any) -> None:
        if kind == "turn" and node.depth == 0 and self.first_turn_at is None:
            self.first_turn_at = time.time()
        self._q.put(render_tree(self.turns, running=True))

    def updates(self, done: Callable[[], bool], poll_s: float = 0.05) -> Iterator[str]:
        """Each newest rendering as it comes, until `done()` and nothing is left."""
        while True:
            try:
                html = self._q.get(timeout=poll_s)
            except queue.Empty:
                if done():
                    return
                continue
            while True:  # coalesce a burst into its newest state
                try:
                    html = self._q.get_nowait()
                except queue.Empty:
                    break
            yield html


def _answer_type(expected: str) -> str:
    return "number" if re.fullmatch(r"\s*[-+]?\d[\d,]*(\.\d+)?\s*", expected) else "string"


def gold_task(question: str, document: str, expected: str) -> Task:
    """A task for the verifier from a question and an answer typed into the page (numbers compare numerically)."""
    meta = TaskMetadata(length_chars=len(document), est_tokens=len(document) // CHARS_PER_TOKEN, difficulty=1,
                        distractors=False, generator_version="external", seed=0, split="external",
                        template="external/ui", haystack="external/ui", token_budget=CUSTOM_TOKEN_BUDGET)
    gold = Gold(answer=expected.strip(), type=_answer_type(expected))  # type: ignore[arg-type]
    return Task("ui-question", "external", question, document, gold, meta)
