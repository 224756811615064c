"""PNG charts: accuracy against tokens spent (Pareto), and the per-checkpoint learning curve."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a job, and no GUI toolkit import
    import matplotlib.pyplot as plt

    return plt


def pareto(points: list[dict[str, Any]], path: str | Path, title: str = "pass@1 against tokens per episode") -> Path:
    """`points`: {label, pass@1, ci, mean_tokens}. Error bars are the bootstrap intervals."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for p in points:
        if p.get("pass@1") is None or p.get("mean_tokens") is None:
            continue
        y = p["pass@1"]
        lo, hi = p.get("ci") or (y, y)
        ax.errorbar([p["mean_tokens"]], [y], yerr=[[y - lo], [hi - y]], fmt="o", capsize=4, label=p["label"])
        ax.annotate(p["label"], (p["mean_tokens"], y), textcoords="offset points", xytext=(6, 6), fontsize=8)
    ax.set_xlabel("mean tokens per episode (root + sub-calls)")
    ax.set_ylabel("pass@1")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if points:
        ax.legend(fontsize=8, loc="best")
    return _save(fig, plt, path)


def learning_curve(rows: list[dict[str, Any]], path: str | Path, base: dict[str, Any] | None = None, *,
                   in_place: bool = False) -> Path:
    """`rows`: {step, pass@1, ci, mean_tokens} per checkpoint, in step order; `base` a horizontal line.
    `in_place`: write the PNG without a rename (a bucket mount; the watcher redraws it every poll anyway)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    rows = [r for r in rows if r.get("pass@1") is not None]
    if rows:
        steps = [r["step"] for r in rows]
        ys = [r["pass@1"] for r in rows]
        ax.plot(steps, ys, "o-", label="checkpoint pass@1")
        ax.fill_between(steps, [r["ci"][0] for r in rows], [r["ci"][1] for r in rows], alpha=0.2)
    if base and base.get("pass@1") is not None:
        ax.axhline(base["pass@1"], color="gray", linestyle="--", label=f"base {base['pass@1']:.3f}")
    ax.set_xlabel("training step (checkpoint)")
    ax.set_ylabel("pass@1")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("held-out pass@1 by checkpoint")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _save(fig, plt, path, in_place=in_place)


def _save(fig: Any, plt: Any, path: str | Path, *, in_place: bool = False) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p if in_place else p.with_name(p.name + ".tmp.png")
    fig.tight_layout()
    fig.savefig(tmp)
    plt.close(fig)
    if tmp != p:
        tmp.replace(p)  # a reader (the report, a copy to the bucket) never sees a half-written PNG
    return p
