"""Layer 1 in-process: the proxies and guards themselves (fast, no worker)."""

from __future__ import annotations

import functools
import operator
import types

import pytest

from fathom.env_server.sandbox.guards import (
    MODULE_PROXIES,
    SafeFormatter,
    SandboxViolation,
    guarded_attrgetter,
    guarded_getattr,
    guarded_import,
    guarded_write,
)

# Callables that evaluate code or walk attributes by name outside the guards.
UNSAFE = {operator.attrgetter, operator.methodcaller, functools.update_wrapper, functools.wraps,
          functools.singledispatch, eval, exec, compile, getattr, setattr, open, __import__, vars, globals}


@pytest.mark.parametrize("name", sorted(MODULE_PROXIES))
def test_proxies_expose_no_modules_privates_or_unsafe_callables(name):
    attrs = MODULE_PROXIES[name]._fathom_attrs
    assert attrs, name
    for key, val in attrs.items():
        assert not key.startswith("_"), (name, key)
        assert not isinstance(val, types.ModuleType), (name, key)
        assert not any(val is u for u in UNSAFE), (name, key)
        assert not isinstance(val, (operator.attrgetter, operator.methodcaller)), (name, key)


def test_import_is_exact_name_only():
    assert guarded_import("json") is MODULE_PROXIES["json"]
    for bad in ("os", "json.decoder", "collections.abc", "re.enum", "", "JSON"):
        with pytest.raises(ImportError):
            guarded_import(bad)
    with pytest.raises(ImportError):
        guarded_import("json", level=1)
    with pytest.raises(AttributeError):
        guarded_import("json", fromlist=("codecs",))


def test_getattr_guard():
    assert guarded_getattr(3, "real") == 3
    for name in ("__class__", "_x", "mro", "f_globals", "gi_frame", "tb_frame", "co_code"):
        with pytest.raises(SandboxViolation):
            guarded_getattr(3, name)
    with pytest.raises(TypeError):
        guarded_getattr(3, 5)


def test_format_is_guarded_but_works():
    fmt = guarded_getattr("{0} {x[1]} {y.real:>3}", "format")
    assert fmt("a", x=[0, "b"], y=7) == "a b   7"
    with pytest.raises(SandboxViolation):
        guarded_getattr("{0.__class__}", "format")(1)
    with pytest.raises(SandboxViolation):
        SafeFormatter().format("{0.__init__.__globals__}", 1)


def test_attrgetter_checks_names_at_construction_and_call():
    assert guarded_attrgetter("real", "imag")(3) == (3, 0)
    with pytest.raises(SandboxViolation):
        guarded_attrgetter("__globals__")
    with pytest.raises(SandboxViolation):
        guarded_attrgetter("real.__class__")


def test_write_guard_allows_only_sandbox_objects():
    assert guarded_write([1]) == [1]
    for ob in (MODULE_PROXIES["json"], len, (1,), "s", 3, types.SimpleNamespace()):
        with pytest.raises(SandboxViolation):
            guarded_write(ob)
