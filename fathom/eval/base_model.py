"""Which base an adapter was trained on: as FATHOM names it (to serve it here) and as the Hub names it (to publish).

PEFT writes `base_model_name_or_path` as the directory the trainer loaded: a FATHOM model directory or a Hub
cache snapshot, meaningless on another machine. The run's resolved config says what the run asked for
(`embedded`, a Hub id, a directory); the export writes both names to `fathom.json` so `fathom serve` finds
the local base again and the Hub sees a Hub id.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from fathom.config.model import EMBEDDED, EMBEDDED_CHANGES, EMBEDDED_SOURCE, TINY

EXPORT_INFO = "fathom.json"
"""Written by `fathom export` beside the adapter: the base's FATHOM model settings and Hub id, the run, the step."""

MODEL_MANIFEST = "fathom_model.json"
"""Written by `fathom model prepare` / `fathom model tiny` in a prepared model directory (`kind`: embedded, tiny)."""

_HUB_CACHE = re.compile(r"models--([^/]+)--([^/]+)/snapshots/([0-9a-f]+)")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def run_model(adapter_dir: Path) -> dict[str, Any] | None:
    """The model settings of the run `adapter_dir` belongs to (an export's `fathom.json`, or the run's
    `config.resolved.json` in it or up to two parents: run/checkpoints/checkpoint-N, run/sft/adapter)."""
    info = _read_json(adapter_dir / EXPORT_INFO)
    if info and isinstance(info.get("model"), dict):
        return info["model"]
    for d in [adapter_dir, *list(adapter_dir.resolve().parents)[:2]]:
        cfg = _read_json(d / "config.resolved.json")
        if cfg and isinstance(cfg.get("model"), dict):
            return cfg.get("server_model") or cfg["model"]
    return None


def model_from_path(base: str) -> dict[str, Any]:
    """FATHOM's name for a base PEFT recorded as a path: a prepared model's kind, a Hub cache snapshot's repo id
    and revision, or the path itself."""
    manifest = _read_json(Path(base) / MODEL_MANIFEST)
    if manifest and manifest.get("kind") in (EMBEDDED, TINY):
        return {"name": manifest["kind"]}
    m = _HUB_CACHE.search(base)
    if m:
        return {"name": f"{m.group(1)}/{m.group(2)}", "revision": m.group(3)}
    return {"name": base}


def is_hub_id(name: str) -> bool:
    return name.count("/") == 1 and not name.startswith(("/", ".", "~")) and not Path(name).exists()


def hub_base(model: dict[str, Any]) -> tuple[str | None, str]:
    """(Hub id of the base or None, a note for the model card on what it is)."""
    name = str(model.get("name", ""))
    if name == EMBEDDED:
        return EMBEDDED_SOURCE, EMBEDDED_CHANGES
    if name == TINY:
        return None, "FATHOM's tiny random-init test model (`fathom model tiny`), which is on no Hub."
    if is_hub_id(name):
        return name, ""
    return None, (f"A local model directory ({name}); name its Hub id with `fathom export --base-model ID` "
                  "before publishing.")
