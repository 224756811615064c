"""Layer 1: the RestrictedPython policy (guards, module proxies, minimal builtins).

RestrictedPython rewrites attribute, item, iteration, write and print operations into
calls of the guard functions below; this module decides what those calls allow. It is
not a boundary on its own (C code can look attributes up past any guard), which is
why every module handed out is a proxy and the process layers sit underneath.
"""

from __future__ import annotations

import _string
import builtins
import collections
import string
import types
import weakref
from typing import Any, Callable

from RestrictedPython.Guards import guarded_iter_unpack_sequence, guarded_unpack_sequence
from RestrictedPython.transformer import INSPECT_ATTRIBUTES

SANDBOX_MODULE_NAME = "__sandbox__"
ALLOWED_MODULES = (
    "re", "json", "math", "statistics", "collections", "itertools", "string",
    "functools", "textwrap", "difflib", "heapq", "bisect", "operator",
)
"""Importable by exact name; `operator` comes with attrgetter/methodcaller behind the name guard."""

# Names that reach frames, code, or let C code evaluate/copy attributes by name.
DENIED_ATTRIBUTES = frozenset(INSPECT_ATTRIBUTES) | {
    "mro", "gi_running", "cr_running", "ag_running", "f_lineno", "f_lasti", "tb_lasti", "tb_lineno",
    "co_consts", "co_names", "co_varnames", "co_filename", "co_name", "co_qualname",
}
# Per-module attributes that evaluate code or copy attributes by name in C/Python
# past the guards (update_wrapper copies `__globals__`; singledispatch evals annotations).
DENIED_MODULE_ATTRIBUTES = {
    "functools": {
        "update_wrapper", "wraps", "singledispatch", "singledispatchmethod", "WRAPPER_ASSIGNMENTS",
        "WRAPPER_UPDATES", "RLock", "GenericAlias", "get_cache_token",
    },
    "difflib": {"GenericAlias"},
    "operator": {"setitem", "delitem", "attrgetter", "methodcaller"},
    "string": {"Formatter"},
    "collections": {"abc"},
    "re": {"template", "TEMPLATE", "T"},
}
_OPAQUE_TYPES = (types.FrameType, types.CodeType, types.TracebackType)
_MUTABLE_CONTAINERS = (
    list, dict, set, bytearray, collections.deque, collections.OrderedDict,
    collections.defaultdict, collections.Counter, collections.UserDict, collections.UserList, collections.ChainMap,
)
# Classes created by `class` statements in the sandbox; writes go only to these and containers.
_SANDBOX_CLASSES: "weakref.WeakSet[type]" = weakref.WeakSet()


class SandboxViolation(PermissionError):
    """An operation the sandbox policy forbids; user code sees it like any exception."""


# Tracebacks shown to the model read "SandboxViolation: ..." without the host's module path.
SandboxViolation.__module__ = "builtins"


def check_name(name: object) -> str:
    if type(name) is not str:
        raise TypeError("attribute name must be a str")
    if name.startswith("_"):
        raise SandboxViolation(f"access to {name!r} is not allowed in the sandbox (names starting with '_')")
    if name in DENIED_ATTRIBUTES:
        raise SandboxViolation(f"access to {name!r} is not allowed in the sandbox (frame/code introspection)")
    return name


class SafeFormatter(string.Formatter):
    """`str.format` semantics with every field lookup going through the guards."""

    def get_field(self, field_name, args, kwargs):  # Formatter's signature
        first, rest = _formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, key in rest:
            obj = guarded_getattr(obj, key) if is_attr else guarded_getitem(obj, key)
        return obj, first


_formatter_field_name_split = _string.formatter_field_name_split
_FORMATTER = SafeFormatter()


def _safe_format(template: str) -> Callable[..., str]:
    def format(*args: Any, **kwargs: Any) -> str:  # stands in for str.format
        return _FORMATTER.vformat(template, args, kwargs)
    return format


def _safe_format_map(template: str) -> Callable[[Any], str]:
    def format_map(mapping: Any) -> str:
        return _FORMATTER.vformat(template, (), mapping)
    return format_map


def _unbound_format(template: str, *args: Any, **kwargs: Any) -> str:
    return _FORMATTER.vformat(template, args, kwargs)


def _unbound_format_map(template: str, mapping: Any) -> str:
    return _FORMATTER.vformat(template, (), mapping)


def guarded_getattr(ob: Any, name: Any, *default: Any) -> Any:
    check_name(name)
    if isinstance(ob, _OPAQUE_TYPES):
        raise SandboxViolation(f"{type(ob).__name__} objects are not accessible in the sandbox")
    if name in ("format", "format_map"):
        if isinstance(ob, str):
            return _safe_format(ob) if name == "format" else _safe_format_map(ob)
        if isinstance(ob, type) and issubclass(ob, str):
            return _unbound_format if name == "format" else _unbound_format_map
        if isinstance(ob, collections.UserString) or ob is collections.UserString:
            raise SandboxViolation("UserString.format is not available in the sandbox; use str(s).format")
        # Only the guarded SafeFormatter is handed out; a raw Formatter would walk attributes in C.
        raw = ob if isinstance(ob, type) else type(ob)
        if isinstance(raw, type) and issubclass(raw, string.Formatter) and not issubclass(raw, SafeFormatter):
            raise SandboxViolation("string.Formatter methods are not available in the sandbox")
    if name.startswith(("gi_", "cr_", "ag_")) and isinstance(
        ob, (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)
    ):
        raise SandboxViolation(f"access to {name!r} is not allowed in the sandbox (generator internals)")
    return getattr(ob, name, *default)


def guarded_hasattr(ob: Any, name: Any) -> bool:
    try:
        guarded_getattr(ob, name)
    except AttributeError:
        return False
    return True


def guarded_getitem(ob: Any, key: Any) -> Any:
    if isinstance(ob, _OPAQUE_TYPES):
        raise SandboxViolation(f"{type(ob).__name__} objects are not accessible in the sandbox")
    return ob[key]


def guarded_write(ob: Any) -> Any:
    """Writes (attribute or item) are allowed only on containers and sandbox-defined classes/instances."""
    if isinstance(ob, _MUTABLE_CONTAINERS) or type(ob) in _SANDBOX_CLASSES or ob in _SANDBOX_CLASSES:
        return ob
    raise SandboxViolation(f"cannot modify a {type(ob).__name__} object in the sandbox (only objects it created)")


def guarded_setattr(ob: Any, name: Any, value: Any) -> None:
    setattr(guarded_write(ob), check_name(name), value)


def guarded_delattr(ob: Any, name: Any) -> None:
    delattr(guarded_write(ob), check_name(name))


def _build_class(func: Any, name: str, *bases: Any, **kw: Any) -> type:
    # RestrictedPython rewrites every class to `metaclass=__metaclass__` (which is `type`).
    if kw.get("metaclass", type) is not type or set(kw) - {"metaclass"}:
        raise SandboxViolation("class keywords (metaclass=...) are not allowed in the sandbox")
    cls = builtins.__build_class__(func, name, *bases, **kw)
    _SANDBOX_CLASSES.add(cls)
    return cls


def guarded_inplacevar(op: str, x: Any, y: Any) -> Any:
    fn = _INPLACE_OPS.get(op)
    if fn is None:
        raise SandboxViolation(f"operator {op!r} is not allowed in the sandbox")
    return fn(x, y)


def _inplace_ops() -> dict[str, Callable[[Any, Any], Any]]:
    import operator

    return {
        "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
        "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "<<=": operator.ilshift,
        ">>=": operator.irshift, "&=": operator.iand, "^=": operator.ixor, "|=": operator.ior,
        "@=": operator.imatmul,
    }


_INPLACE_OPS = _inplace_ops()


def guarded_attrgetter(*names: str) -> Callable[[Any], Any]:
    paths = []
    for n in names:
        if type(n) is not str:
            raise TypeError("attribute name must be a str")
        paths.append([check_name(part) for part in n.split(".")])

    def get(ob: Any) -> Any:
        vals = []
        for path in paths:
            v = ob
            for part in path:
                v = guarded_getattr(v, part)
            vals.append(v)
        return vals[0] if len(vals) == 1 else tuple(vals)

    return get


def guarded_methodcaller(name: str, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    check_name(name)
    return lambda ob: guarded_getattr(ob, name)(*args, **kwargs)


class ModuleProxy:
    """A read-only view of a whitelisted module: no submodules, no private names."""

    __slots__ = ("_fathom_name", "_fathom_attrs")

    def __init__(self, name: str, attrs: dict[str, Any]) -> None:
        object.__setattr__(self, "_fathom_name", name)
        object.__setattr__(self, "_fathom_attrs", attrs)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fathom_attrs[name]
        except KeyError:
            raise AttributeError(f"module {self._fathom_name!r} has no attribute {name!r} in the sandbox") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise SandboxViolation(f"cannot modify module {self._fathom_name!r} in the sandbox")

    def __repr__(self) -> str:
        return f"<sandbox module {self._fathom_name!r}>"


def _make_proxy(name: str) -> ModuleProxy:
    import importlib

    mod = importlib.import_module(name)
    denied = DENIED_MODULE_ATTRIBUTES.get(name, set())
    attrs: dict[str, Any] = {}
    for key in dir(mod):
        if key.startswith("_") or key in denied:
            continue
        val = getattr(mod, key)
        if isinstance(val, types.ModuleType):
            continue
        attrs[key] = val
    if name == "operator":
        attrs["attrgetter"] = guarded_attrgetter
        attrs["methodcaller"] = guarded_methodcaller
    if name == "string":
        attrs["Formatter"] = SafeFormatter
    return ModuleProxy(name, attrs)


MODULE_PROXIES = {name: _make_proxy(name) for name in ALLOWED_MODULES}


def guarded_import(name: Any, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
    if level != 0:
        raise ImportError("relative imports are not allowed in the sandbox")
    proxy = MODULE_PROXIES.get(name) if type(name) is str else None
    if proxy is None:
        raise ImportError(
            f"import of {name!r} is not allowed in the sandbox; available modules: {', '.join(ALLOWED_MODULES)}"
        )
    for item in fromlist or ():
        check_name(item)
        getattr(proxy, item)
    return proxy


def _apply(f: Any, *args: Any, **kwargs: Any) -> Any:
    return f(*args, **kwargs)


_BUILTIN_NAMES = (
    "abs", "all", "any", "ascii", "bin", "bool", "bytes", "bytearray", "callable", "chr", "complex", "dict",
    "divmod", "enumerate", "filter", "float", "format", "frozenset", "hash", "hex", "int", "isinstance",
    "issubclass", "len", "list", "map", "max", "min", "next", "oct", "ord", "pow", "range", "repr",
    "reversed", "round", "set", "slice", "sorted", "str", "sum", "tuple", "zip", "classmethod",
    "staticmethod", "property", "NotImplemented", "Ellipsis", "None", "True", "False",
    "ArithmeticError", "AssertionError", "AttributeError", "Exception", "IndexError", "KeyError",
    "LookupError", "MemoryError", "NameError", "NotImplementedError", "OverflowError", "RecursionError",
    "RuntimeError", "StopIteration", "TypeError", "UnicodeDecodeError", "UnicodeEncodeError",
    "UnicodeError", "ValueError", "ZeroDivisionError", "ImportError", "PermissionError",
)


def make_builtins() -> dict[str, Any]:
    b = {name: getattr(builtins, name) for name in _BUILTIN_NAMES}
    b.update(
        getattr=guarded_getattr, hasattr=guarded_hasattr, setattr=guarded_setattr, delattr=guarded_delattr,
        iter=iter, __build_class__=_build_class, __import__=guarded_import,
    )
    return b


def restricted_globals(printer_factory: Callable[..., Any]) -> dict[str, Any]:
    """The fresh namespace of one episode: builtins, guard hooks, nothing else."""
    return {
        "__builtins__": make_builtins(),
        "__name__": SANDBOX_MODULE_NAME,
        "__metaclass__": type,
        "_getattr_": guarded_getattr,
        "_getitem_": guarded_getitem,
        "_getiter_": iter,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
        "_write_": guarded_write,
        "_inplacevar_": guarded_inplacevar,
        "_apply_": _apply,
        "_print_": printer_factory,
    }
