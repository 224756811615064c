"""Config plumbing shared by every component: strict models, TOML load, dotted overrides.

Every component's settings are a `FathomModel` subclass in its own module, and each
field carries a docstring (`use_attribute_docstrings`), which pydantic keeps as the field's
description, so the JSON schema and readers of the config module see what a field means.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict


def local_url(host: str, port: int) -> str:
    """`http://host:port` as a client on this machine reaches a server bound to `host`: a wildcard bind
    (0.0.0.0, ::, or empty) is reached on loopback, since a wildcard is an address to bind, not to connect to."""
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{port}"


class FathomModel(BaseModel):
    """Base for every config model: unknown keys are errors, fields are documented."""

    model_config = ConfigDict(
        extra="forbid",
        use_attribute_docstrings=True,
        validate_assignment=True,
        protected_namespaces=(),
    )


def fathom_home() -> Path:
    """Where prepared models and caches live: `$FATHOM_HOME`, default `~/.cache/fathom`."""
    return Path(os.environ.get("FATHOM_HOME", Path.home() / ".cache" / "fathom")).expanduser()


class ConfigError(ValueError):
    """A config file or override that cannot be used; the message names the input."""


def read_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist; pass a path such as configs/smoke.toml")
    try:
        return tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {str(p)!r} is not valid TOML: {e}") from e


def _parse_scalar(text: str) -> Any:
    """Parse an override value the way TOML would (`1e-6`, `true`, `[1,2]`, `"x"`), else keep the string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `section.key=value` or `--section.key value` pairs to a nested dict, in order."""
    pairs: list[tuple[str, str]] = []
    i = 0
    while i < len(overrides):
        item = overrides[i]
        key = item[2:] if item.startswith("--") else item
        if "=" in key:
            k, v = key.split("=", 1)
            i += 1
        elif i + 1 < len(overrides):
            k, v = key, overrides[i + 1]
            i += 2
        else:
            raise ConfigError(f"override {item!r} has no value; write --{key} VALUE or {key}=VALUE")
        pairs.append((k, v))
    out = _deepcopy(data)
    for dotted, raw in pairs:
        parts = dotted.split(".")
        if not all(parts):
            raise ConfigError(f"override key {dotted!r} is malformed; use dotted names like trainer.learning_rate")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {dotted!r}: {part!r} is a value, not a section")
        node[parts[-1]] = _parse_scalar(raw)
    return out


def _deepcopy(d: dict[str, Any]) -> dict[str, Any]:
    return {k: _deepcopy(v) if isinstance(v, dict) else v for k, v in d.items()}


def cuda_visible(index: int, environ: dict[str, str] | None = None) -> str:
    """CUDA_VISIBLE_DEVICES for a process given device `index` of those this process may see: the index-th entry
    of an inherited CUDA_VISIBLE_DEVICES (a shared machine's allotment), else the index itself."""
    import os

    inherited = [d for d in (environ if environ is not None else os.environ).get("CUDA_VISIBLE_DEVICES", "")
                 .split(",") if d.strip()]
    if not inherited:
        return str(index)
    if index >= len(inherited):
        raise ConfigError(f"cuda_device {index} is past the {len(inherited)} GPU(s) in CUDA_VISIBLE_DEVICES "
                          f"({','.join(inherited)}): set policy_server.cuda_device / trainer.cuda_device below "
                          f"{len(inherited)}")
    return inherited[index].strip()
