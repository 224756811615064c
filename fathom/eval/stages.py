"""The main job's final evaluation across stages (base, SFT, GRPO): which tasks each stage is scored on, and
pass@1 per stage with paired stage-to-stage differences."""

from __future__ import annotations


def stage_tasks(ids: list[str], adapter: str | None, base_n_tasks: int | None) -> list[str]:
    """The tasks one stage is scored on: all of them, or the first `base_n_tasks` for the base model."""
    return ids[:base_n_tasks] if adapter is None and base_n_tasks else ids


def summarize_stages(per_stage: dict[str, dict[str, bool]], results: dict[str, dict], *, boot: dict,
                     beyond_fraction: float, wall_s: float) -> dict:
    """pass@1 of each stage and the paired difference of each stage against the one before it and the first."""
    from fathom.eval.stats import paired

    labels = list(per_stage)
    out: dict = {"stages": {}, "paired": {}, "beyond_window_fraction": beyond_fraction, "wall_s": round(wall_s, 1)}
    for label in labels:
        s = results[label]
        out["stages"][label] = {"pass@1": s["pass@1"], "unscorable": s["unscorable"], "n": s["n"],
                                "mean_tokens": s["tokens"]["mean_total"], "by_family": s["by_family"],
                                "selectivity": s.get("selectivity"), "routing": s.get("routing")}
    pairs = [(labels[i - 1], labels[i]) for i in range(1, len(labels))]
    if len(labels) > 2:
        pairs.append((labels[0], labels[-1]))
    keys = ("n", "both", "only_base", "only_adapter", "neither", "delta", "ci")
    by_family: dict[str, set[str]] = {}
    for t in {t for stage in per_stage.values() for t in stage}:
        by_family.setdefault(_family(t), set()).add(t)
    out["paired_by_family"] = {}
    for a, b in pairs:
        c = paired(per_stage[a], per_stage[b], **boot)
        out["paired"][f"{b}-{a}"] = {k: c[k] for k in keys}
        out["paired_by_family"][f"{b}-{a}"] = {
            fam: {k: v for k, v in paired({t: x for t, x in per_stage[a].items() if t in ids},
                                          {t: x for t, x in per_stage[b].items() if t in ids}, **boot).items()
                  if k in keys}
            for fam, ids in sorted(by_family.items()) if fam}
    return out


def _family(task_id: str) -> str:
    """The family in a task id; '' for an id that is not a generated task's."""
    from fathom.tasks.record import parse_id

    try:
        return parse_id(task_id)[0]
    except KeyError:
        return ""
