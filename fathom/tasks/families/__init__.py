"""Task families: each module exposes FAMILY, TEMPLATES (by split) and generate(spec) -> Task."""

from __future__ import annotations

from types import ModuleType

from fathom.tasks.families import aggregate, bios, code_qa, kv_chain, needle, pairs

# The order is the manifests' round-robin order (tasks/splits.py): a new family goes at the end.
MODULES: dict[str, ModuleType] = {m.FAMILY: m for m in (needle, kv_chain, aggregate, pairs, code_qa, bios)}
