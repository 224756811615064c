"""Task families: each module exposes FAMILY, TEMPLATES (by split) and generate(spec) -> Task."""

from __future__ import annotations

from types import ModuleType

from fathom.tasks.families import aggregate, code_qa, kv_chain, needle, pairs

MODULES: dict[str, ModuleType] = {m.FAMILY: m for m in (needle, kv_chain, aggregate, pairs, code_qa)}
