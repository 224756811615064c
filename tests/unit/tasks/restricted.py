"""Run a reference solution the way the sandbox would: RestrictedPython, minimal builtins, whitelisted imports."""

from __future__ import annotations

import importlib

from RestrictedPython import compile_restricted_exec, limited_builtins, safe_builtins
from RestrictedPython.Eval import default_guarded_getitem, default_guarded_getiter
from RestrictedPython.Guards import full_write_guard, safer_getattr

from fathom.env_server.sandbox import toolbox
from fathom.tasks import subcall_answer

ALLOWED_IMPORTS = {"re", "json", "math", "statistics", "collections", "itertools", "string", "functools",
                   "textwrap", "difflib", "heapq", "bisect"}


def _import(name, globals=None, locals=None, fromlist=(), level=0):
    if name not in ALLOWED_IMPORTS or level:
        raise ImportError(f"import of {name!r} is not allowed")
    return importlib.import_module(name)


def teacher_llm(prompt: str) -> str:
    """llm() answered as the SFT teacher answers it: the generator's own reading of the passages."""
    return subcall_answer(prompt) or ""


def run_restricted(source: str, context: str, question: str = "", llm=teacher_llm) -> list[object]:
    """Compile under RestrictedPython's policy and run; returns every value passed to FINAL."""
    result = compile_restricted_exec(source, filename="<reference>")
    if result.errors:
        raise SyntaxError("; ".join(result.errors))
    finals: list[object] = []
    builtins = dict(safe_builtins)
    builtins.update(limited_builtins)
    builtins.update({"set": set, "max": max, "min": min, "sum": sum, "__import__": _import})  # min: the toolbox's line_at
    env = {"__builtins__": builtins, "_getattr_": safer_getattr, "_getitem_": default_guarded_getitem,
           "_getiter_": default_guarded_getiter, "_write_": full_write_guard, "__name__": "sandbox",
           "__metaclass__": type, "context": context, "question": question, "FINAL": finals.append,
           "llm": llm}
    install_toolbox(env, builtins, context)
    exec(result.code, env)  # noqa: S102 - RestrictedPython-compiled reference programs
    return finals


def install_toolbox(env: dict, builtins: dict, context: str) -> None:
    """The REPL's helpers (grep, ...), compiled under the same policy and run in a namespace of their own."""
    code = compile_restricted_exec(toolbox.SOURCE, filename="<toolbox>")
    if code.errors:
        raise SyntaxError("; ".join(code.errors))
    own = {k: v for k, v in env.items() if k not in ("context", "question", "FINAL", "llm")}
    toolbox.install(env, own, code.code, context, importlib.import_module("re"))
