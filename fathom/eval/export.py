"""`fathom export RUN_DIR`: one directory to publish or serve: the adapter, a model card, eval results.

The output loads with `PeftModel.from_pretrained(base, DIR)` and with
`vllm serve BASE --enable-lora --lora-modules fathom=DIR`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

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


def _results_table(path: Path) -> list[str]:
    res = json.loads(path.read_text())
    lines = [f"Split `{res['split']}`, {res['n_tasks']} tasks, temperature {res['sampling']['temperature']}, "
             f"output cap {res['sampling']['max_tokens']} tokens; {int(res['confidence'] * 100)}% bootstrap intervals.", "",
             "| model | pass@1 | interval | scorable | unscorable | tokens/episode |", "|---|---|---|---|---|---|"]
    for label, m in res["models"].items():
        s, p = m["summary"], m["summary"]["pass@1"]
        ci = f"[{p['ci'][0]:.3f}, {p['ci'][1]:.3f}]" if p["ci"] else "n/a"
        rate = f"{p['pass@1']:.3f}" if p["pass@1"] is not None else "n/a"
        lines.append(f"| {label} | {rate} | {ci} | {s['scorable']} | {s['unscorable']} | {s['tokens']['mean_total'] or 0:.0f} |")
    for c in res.get("comparisons") or []:
        if c.get("delta") is not None:
            lines += ["", f"{c['adapter']} against {c['base']}, paired over {c['n']} tasks: both {c['both']}, only "
                          f"{c['base']} {c['only_base']}, only {c['adapter']} {c['only_adapter']}, neither {c['neither']}; "
                          f"difference {c['delta']:+.3f} [{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}]."]
    return lines


def model_card(adapter_cfg: dict[str, Any], *, run_name: str, step: int | None, evals: dict[str, Path]) -> str:
    base = adapter_cfg.get("base_model_name_or_path") or "BASE_MODEL"
    # A local base path is no Hub id, so it stays out of the card's metadata.
    meta = ["---", "library_name: peft", *([f"base_model: {base}"] if "/" in base and not base.startswith("/") else []),
            "tags:", "- fathom", "- recursive-language-model", "- lora", "- grpo", "---"]
    lines = [*meta, "",
             f"# FATHOM adapter: {run_name}" + (f" (checkpoint {step})" if step is not None else ""), "",
             "A LoRA adapter trained with FATHOM (async GRPO on token-faithful RLM traces) to work over documents far "
             "larger than its context window: the document lives in a Python REPL as `context`, the model slices "
             "and greps it, calls `llm()` on small pieces, and answers with `FINAL(...)`.", "",
             f"LoRA rank {adapter_cfg.get('r')}, alpha {adapter_cfg.get('lora_alpha')}, target modules "
             f"{', '.join(sorted(adapter_cfg.get('target_modules') or []))}.", "", "## Serve it", "", "```bash",
             f"vllm serve {base} --enable-lora --max-lora-rank {max(16, int(adapter_cfg.get('r') or 16))} "
             "--lora-modules fathom=./  # then request model \"fathom\"",
             "fathom ask --document FILE --question Q --base-url http://127.0.0.1:8000 --model fathom",
             "```", "", "## Load it with PEFT", "", "```python", "from peft import PeftModel",
             "from transformers import AutoModelForCausalLM", "",
             f"model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained({base!r}), \"./\")", "```", ""]
    results = sorted(k for k in evals if k.endswith("/results.json"))
    if results or "summary.json" in evals:
        lines += ["## Evaluation", ""]
    for k in results:
        lines += [f"### {k.split('/')[0]}", "", *_results_table(evals[k]), ""]
        if f"{k.split('/')[0]}/pareto.png" in evals:
            lines += [f"![pass@1 against tokens](eval/{k.split('/')[0]}/pareto.png)", ""]
        if f"{k.split('/')[0]}/report.html" in evals:
            lines += [f"Episodes as recursion trees: [eval/{k.split('/')[0]}/report.html](eval/{k.split('/')[0]}/report.html).", ""]
    if "summary.json" in evals:
        rows = json.loads(evals["summary.json"].read_text()).get("checkpoints", [])
        lines += ["### Per checkpoint", "", "| step | pass@1 | tokens/episode |", "|---|---|---|"]
        lines += [f"| {r['step']} | {r['pass@1'] if r['pass@1'] is not None else 'n/a'} | {r['mean_tokens'] or 0:.0f} |"
                  for r in rows]
        if "learning_curve.png" in evals:
            lines += ["", "![learning curve](eval/learning_curve.png)"]
        lines.append("")
    return "\n".join(x for i, x in enumerate(lines) if x or (i and lines[i - 1])) + "\n"  # no double blank lines


def export(run_dir: str | Path, out: str | Path | None = None, *, step: int | None = None) -> Path:
    run = Path(run_dir)
    if not run.is_dir():
        raise ExportError(f"run directory {str(run)!r} does not exist; pass a run dir such as runs/smoke")
    src, step = find_adapter(run, step)
    dest = Path(out) if out else run / "export"
    if dest.resolve() == src.resolve():
        raise ExportError(f"--out {dest} is the adapter directory itself; choose another")
    dest.mkdir(parents=True, exist_ok=True)
    for f in ADAPTER_FILES:
        shutil.copy2(src / f, dest / f)
    evals = _eval_files(run)
    for rel, p in evals.items():
        (dest / "eval" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, dest / "eval" / rel)
    cfg = json.loads((src / "adapter_config.json").read_text())
    (dest / "README.md").write_text(model_card(cfg, run_name=run.name, step=step, evals=evals))
    return dest
