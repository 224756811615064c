"""`fathom plot RUN_DIR`: PNG charts from metrics.jsonl.

A chart lists metric keys; a key ending in `/*` stands for every key under that prefix (one line per family of
`train_success/*`). What each learning-dynamics key means, and which question about a falling training curve it
answers, is in docs/main_job.md ("Why training-time success can fall").
"""

from __future__ import annotations

import json
from pathlib import Path

CHARTS: dict[str, list[str]] = {
    "reward": ["reward", "reward/total"],
    "reward_components": ["reward/correctness", "reward/format", "reward/token_budget", "reward/recursion",
                          "reward/tool_bonus"],
    "loss": ["loss"],
    "kl": ["kl"],
    "entropy": ["entropy"],
    "mismatch": ["mismatch/abs_ratio_minus_1"],
    "completion_length": ["completions/mean_length"],
    "subcalls": ["episode/subcalls_mean", "episode/turns_mean"],
    "sync_time": ["perf/weight_sync_s", "perf/weight_sync_write_s", "perf/weight_sync_reload_s"],
    # learning dynamics: success on GRPO's own rollouts, how much signal the groups carry, and how far and how
    # off-policy the updates are
    "train_success": ["train_success/*"],
    "group_signal": ["rollout/group_reward_std", "rollout/flat_group_frac"],
    "sampled_nll": ["rollout/sampled_nll"],
    "is_ratio": ["ratio", "is_ratio/min", "is_ratio/max", "clip_ratio/region_mean"],
    "drift_from_start": ["drift/lora_delta_norm", "drift/lora_delta_rel"],
    "staleness": ["sample/staleness_mean", "sample/staleness_max", "mismatch/on_policy_token_frac"],
    "task_length": ["train/context_chars_mean"],
}


def chart_keys(keys: list[str], rows: list[dict]) -> list[str]:
    """`keys` with each `prefix/*` expanded to the keys under it that some row holds, sorted."""
    out: list[str] = []
    for k in keys:
        if k.endswith("/*"):
            out += sorted({key for r in rows for key in r if key.startswith(k[:-1])})
        else:
            out.append(k)
    return out


class PlotError(ValueError):
    """The run directory has nothing to plot; the message says what is missing."""


def read_metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise PlotError(f"{path} does not exist; pass a run directory written by `fathom train`")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        raise PlotError(f"{path} is empty; the run logged no step yet")
    return rows


def plot_run(run_dir: str | Path) -> list[Path]:
    """One PNG per chart that has data, under RUN_DIR/plots; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    out_dir = Path(run_dir) / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, keys in CHARTS.items():
        series = {k: [(r["step"], r[k]) for r in rows if isinstance(r.get(k), (int, float))]
                  for k in chart_keys(keys, rows)}
        series = {k: v for k, v in series.items() if v}
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for k, pts in series.items():
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o", markersize=3, label=k)
        ax.set_xlabel("step")
        ax.set_title(name.replace("_", " "))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    if not written:
        raise PlotError(f"{Path(run_dir) / 'metrics.jsonl'} holds none of the charted metrics")
    return written
