"""`fathom export RUN_DIR`: one directory to publish or serve: the adapter, a model card, eval results.

The output loads with `PeftModel.from_pretrained(base, DIR)`, with `fathom serve DIR`, and on a GPU with
`vllm serve BASE --enable-lora --lora-modules fathom=DIR`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from fathom.config.model import EMBEDDED, EMBEDDED_SOURCE
from fathom.eval.base_model import EXPORT_INFO, hub_base, is_hub_id, model_from_path, run_model
from fathom.eval.card import ADAPTER_NAME, model_card
from fathom.eval.checkpoints import ADAPTER_FILES, CHECKPOINT, DirSource, adapter_complete


class ExportError(ValueError):
    """The run directory holds nothing exportable; the message names the path and the fix."""


def find_adapter(run_dir: Path, step: int | None = None) -> tuple[Path, int | None]:
    """The newest complete checkpoint of the run (or `step`), or the run dir itself when it is an adapter."""
    if adapter_complete(run_dir):
        return run_dir, None
    found = DirSource(run_dir).complete()
    if step is not None:
        if step not in found:
            raise ExportError(f"{run_dir} has no complete checkpoint-{step}/ (complete: {sorted(found) or 'none'})")
        return found[step], step
    if not found:
        raise ExportError(f"{run_dir} has no complete checkpoint (checkpoints/checkpoint-N/ with "
                          f"{' and '.join(ADAPTER_FILES)}); train first, or pass the adapter directory itself")
    return found[max(found)], max(found)


def _eval_files(run_dir: Path) -> dict[str, Path]:
    """Eval outputs worth shipping: the watcher's summary and curve, and each split's results and report."""
    ev = run_dir / "eval"
    out = {}
    for name in ("summary.json", "learning_curve.png"):
        if (ev / name).is_file():
            out[name] = ev / name
    for res in sorted(ev.glob("*/results.json")) if ev.is_dir() else []:
        if res.parent.name == "base" or CHECKPOINT.fullmatch(res.parent.name):
            continue  # the watcher's per-checkpoint reports: summary.json and the curve stand for them
        for name in ("results.json", "pareto.png", "report.html"):
            if (res.parent / name).is_file():
                out[f"{res.parent.name}/{name}"] = res.parent / name
    return out


def _base_chat_template(adapter_cfg: dict[str, Any]) -> str | None:
    """The chat template of the local base the adapter was trained on, when that directory is here."""
    d = Path(str(adapter_cfg.get("base_model_name_or_path") or "")).expanduser()
    if (d / "chat_template.jinja").is_file():
        return (d / "chat_template.jinja").read_text()
    tok = d / "tokenizer_config.json"
    template = json.loads(tok.read_text()).get("chat_template") if tok.is_file() else None
    return template if isinstance(template, str) else None


def export(run_dir: str | Path, out: str | Path | None = None, *, step: int | None = None,
           base_model: str | None = None) -> Path:
    """Copy the adapter, its eval results and a model card to `out`. `base_model`: the base's Hub id, where the
    run's config cannot tell it (a local model directory). The adapter's `base_model_name_or_path` becomes that
    Hub id; what FATHOM calls the base goes to `fathom.json`, where `fathom serve` reads it."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ExportError(f"run directory {str(run)!r} does not exist; pass a run dir such as runs/smoke")
    src, step = find_adapter(run, step)
    dest = Path(out) if out else run / "export"
    if dest.resolve() == src.resolve():
        raise ExportError(f"--out {dest} is the adapter directory itself; choose another")
    if base_model is not None and not is_hub_id(base_model):
        raise ExportError(f"--base-model {base_model!r} is not a Hub id like 'org/name'")
    cfg = json.loads((src / "adapter_config.json").read_text())
    model = run_model(src) or run_model(run) or model_from_path(str(cfg.get("base_model_name_or_path") or ""))
    hub, note = (base_model, "") if base_model else hub_base(model)
    template = _base_chat_template(cfg) if hub == EMBEDDED_SOURCE and model.get("name") == EMBEDDED else None
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src / "adapter_model.safetensors", dest / "adapter_model.safetensors")
    (dest / "adapter_config.json").write_text(json.dumps({**cfg, "base_model_name_or_path": hub or
                                                          cfg.get("base_model_name_or_path")}, indent=2) + "\n")
    if template:
        (dest / "chat_template.jinja").write_text(template)
    (dest / EXPORT_INFO).write_text(json.dumps({"model": model, "base_model": hub, "adapter_name": ADAPTER_NAME,
                                                "run": run.name, "step": step}, indent=2) + "\n")
    evals = _eval_files(run)
    for rel, p in evals.items():
        (dest / "eval" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, dest / "eval" / rel)
    (dest / "README.md").write_text(model_card(cfg, run_name=run.name, step=step, evals=evals, base_id=hub,
                                               base_note=note, chat_template=bool(template)))
    return dest


def served_adapter(path: str | Path) -> tuple[Path, dict[str, Any], int]:
    """What `fathom serve PATH` serves: (adapter directory, its base as FATHOM names it, LoRA rank). `PATH` is an
    export or adapter directory, or a run directory: its `export/` when complete, else its newest checkpoint."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ExportError(f"{str(p)!r} is no directory; pass an exported adapter (runs/NAME/export), an adapter "
                          "directory or a run directory (runs/NAME)")
    if not adapter_complete(p) and adapter_complete(p / "export"):
        p = p / "export"
    src, _ = find_adapter(p)
    cfg = json.loads((src / "adapter_config.json").read_text())
    model = run_model(src) or run_model(p) or model_from_path(str(cfg.get("base_model_name_or_path") or ""))
    return src, model, int(cfg.get("r") or 16)
