"""pass@1 with bootstrap intervals, and the paired comparison of two models on the same tasks.

Percentile bootstrap over tasks: simple, assumption-light, and right for the question a user asks
("how sure is this accuracy?"). The paired version resamples tasks once for both models, so the
interval of the difference reflects that both saw the same tasks (much tighter than two
independent intervals when the models agree on most tasks).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def bootstrap_ci(values: Sequence[float], *, n: int = 2000, confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the mean; (nan, nan) for no values."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n, x.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(lo), float(hi)


def pass_at_1(correct: Sequence[bool], *, n: int = 2000, confidence: float = 0.95, seed: int = 0) -> dict:
    """pass@1 over scorable episodes (one attempt per task) with its bootstrap interval."""
    k = len(correct)
    lo, hi = bootstrap_ci([float(c) for c in correct], n=n, confidence=confidence, seed=seed)
    return {"n": k, "correct": int(sum(correct)), "pass@1": (sum(correct) / k) if k else None,
            "ci": [lo, hi] if k else None}


def paired(base: dict[str, bool], adapter: dict[str, bool], *, n: int = 2000, confidence: float = 0.95,
           seed: int = 0) -> dict:
    """Both / only-base / only-adapter / neither over tasks scorable under both, with the paired interval
    of pass@1(adapter) - pass@1(base). Tasks unscorable under either model are counted, not compared."""
    common = sorted(set(base) & set(adapter))
    b = np.array([base[t] for t in common], dtype=float)
    a = np.array([adapter[t] for t in common], dtype=float)
    out = {
        "n": len(common),
        "both": int(((a == 1) & (b == 1)).sum()),
        "only_base": int(((a == 0) & (b == 1)).sum()),
        "only_adapter": int(((a == 1) & (b == 0)).sum()),
        "neither": int(((a == 0) & (b == 0)).sum()),
        "excluded": len(set(base) ^ set(adapter)),
        "delta": None, "ci": None,
        "only_base_tasks": [t for t, x, y in zip(common, b, a) if x == 1 and y == 0],
        "only_adapter_tasks": [t for t, x, y in zip(common, b, a) if x == 0 and y == 1],
    }
    if common:
        diff = a - b
        out["delta"] = float(diff.mean())
        out["ci"] = list(bootstrap_ci(diff, n=n, confidence=confidence, seed=seed))
    return out
