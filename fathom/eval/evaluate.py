"""Evaluate one model, or base against adapter, on the same tasks: the numbers behind `fathom eval`."""

from __future__ import annotations

import datetime as dt
from typing import Any, Callable

from fathom.eval.metrics import episode_row, summarize
from fathom.eval.runner import EvalRunner, EvalTarget
from fathom.eval.stats import paired
from fathom.protocol import EpisodeLimits, EpisodeResult, Sampling


def run_models(targets: list[EvalTarget], task_ids: list[str], *, sampling: Sampling, limits: EpisodeLimits,
               concurrency: int, timeout_s: float,
               on_result: Callable[[str, EpisodeResult], None] | None = None) -> dict[str, list[EpisodeResult]]:
    """Each target on every task, one target after the other (so they never compete for the engine)."""
    out = {}
    for t in targets:
        runner = EvalRunner(t, sampling=sampling, limits=limits, concurrency=concurrency, timeout_s=timeout_s)
        out[t.label] = runner.run(task_ids, (lambda r, label=t.label: on_result(label, r)) if on_result else None)
    return out


def build_results(episodes: dict[str, list[EpisodeResult]], *, targets: list[EvalTarget], split: str,
                  task_ids: list[str], sampling: Sampling, limits: EpisodeLimits, max_model_len: int,
                  bootstrap: int = 2000, confidence: float = 0.95, seed: int = 0) -> dict[str, Any]:
    boot = {"n": bootstrap, "confidence": confidence, "seed": seed}
    models = {}
    for t in targets:
        rows = [episode_row(r) for r in episodes[t.label]]
        models[t.label] = {"model": t.model, "summary": summarize(rows, max_model_len=max_model_len, boot=boot),
                           "rows": rows}
    # Every other model against the first (the base when there is one), each paired on the same tasks.
    verdict = lambda label: {r["task_id"]: bool(r["correct"]) for r in models[label]["rows"] if r["scorable"]}  # noqa: E731 - a one-line helper used right below
    ref = targets[0].label
    comparisons = [{"base": ref, "adapter": t.label, **paired(verdict(ref), verdict(t.label), **boot)}
                   for t in targets[1:]]
    return {
        "split": split, "n_tasks": len(task_ids), "task_ids": task_ids,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "sampling": sampling.model_dump(), "limits": limits.model_dump(), "confidence": confidence,
        "bootstrap": bootstrap, "models": models,
        "comparison": comparisons[0] if comparisons else None, "comparisons": comparisons,
    }
