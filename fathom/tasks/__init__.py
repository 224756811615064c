"""Long-context task suite: deterministic families, pinned splits, loaders and an audited reward.

    task = get_task("needle-64k-s1000123")      # or generate("needle", 1000123, 65536)
    ids = load_split("test")
    rc = score(task, "4976997", via_final=True, total_tokens=900, llm_calls=0)
"""

from __future__ import annotations

from fathom.tasks.generate import FAMILIES, describe, generate, get_task, register
from fathom.tasks.loaders import load_hub, load_jsonl
from fathom.tasks.record import Gold, Task, TaskMetadata
from fathom.tasks.reference import reference_solution, subcall_answer
from fathom.tasks.reward import score
from fathom.tasks.splits import configure, load_split

__all__ = ["FAMILIES", "configure", "describe", "Gold", "Task", "TaskMetadata", "generate", "get_task", "load_hub",
           "load_jsonl", "load_split", "reference_solution", "register", "score", "subcall_answer"]
