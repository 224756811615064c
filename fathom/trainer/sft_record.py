"""One scripted-teacher episode recorded for SFT: its training rows and a summary line."""

from __future__ import annotations

from typing import Any


def record_episode(factory: Any, task_id: str, max_length: int) -> tuple[list[dict], dict[str, Any]]:
    """One teacher episode: its training rows (empty unless it was solved with no cut turn), each tagged with the
    task's family (for `trainer.sft_anchor_families`), and a summary."""
    from fathom.tasks.record import parse_id
    from fathom.trainer.sft import rows_from_trace

    session = factory.create(task_id)
    try:
        session.wait_for_completion()
        trace = session.fetch_training_trace()
        verdict = session.verify([])
    finally:
        session.close()
    res = session.result
    cut = any(t.metadata.get("finish_reason") == "length" for t in trace.turns)
    correct = bool(res and res.reward_components and res.reward_components.correct)
    family = parse_id(task_id)[0]
    rows = [{**r, "family": family} for r in rows_from_trace(trace)] if correct and not cut else []
    too_long = [r for r in rows if len(r["input_ids"]) > max_length]
    summary = {"task_id": task_id, "reward": verdict.env_reward, "correct": correct, "cut": cut,
               "turns": len(res.turns) if res else 0, "stop_reason": res.stop_reason if res else None,
               "rows": 0 if too_long else len(rows), "tokens": sum(len(r["input_ids"]) for r in rows)}
    return ([] if too_long else rows), summary
