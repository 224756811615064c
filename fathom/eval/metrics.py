"""From episode results to numbers: one row per episode, then the summary of a model on a split.

An unscorable episode (status `error`: env, proxy or engine failure) is listed apart and never
enters pass@1 as a wrong answer. Everything else reads the recursion tree the env server returns.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any, Iterable

from fathom.eval.stats import pass_at_1
from fathom.protocol import EpisodeResult, SubCall, TurnStat
from fathom.tasks.generate import FAMILIES, describe
from fathom.tasks.reference import program_family
from fathom.tasks.record import CHARS_PER_TOKEN, length_tag

# What the sandbox writes when code fails: a traceback, a compile or RestrictedPython refusal, or an
# exception line. The harness keeps only the text shown to the model, so this reads that text.
_REPL_ERROR = re.compile(
    r"^(Traceback \(most recent call last\):|code could not be compiled|non-ASCII identifier|Line \d+: |"
    r"[A-Za-z_][\w.]*(Error|Exception): )", re.MULTILINE)


def bucket_length(length: int) -> int:
    """Generated lengths are powers of two (and 10m); an imported document's length rounds up to the next
    power of two, so results group by scale rather than one bucket per document."""
    if length <= 1024:
        return 1024
    if length & (length - 1) == 0 or length % 2**20 == 0:
        return length
    return 1 << (length - 1).bit_length()


def repl_error(output: str) -> bool:
    return bool(_REPL_ERROR.search(output))


def _walk_turns(turns: Iterable[TurnStat]) -> Iterable[TurnStat]:
    """Every turn of the tree: root turns, then the turns of nested RLM sub-episodes under them."""
    for t in turns:
        yield t
        for s in t.subcalls:
            yield from _walk_turns(s.turns)


def _walk_subcalls(turns: Iterable[TurnStat]) -> Iterable[SubCall]:
    for t in turns:
        for s in t.subcalls:
            yield s
            yield from _walk_subcalls(s.turns)


def _sub_tokens(turns: Iterable[TurnStat]) -> int:
    """Tokens of every sub-call under these turns; a nested episode counts through its own turns."""
    total = 0
    for t in turns:
        for s in t.subcalls:
            if s.turns:
                total += sum(x.prompt_tokens + x.completion_tokens for x in s.turns) + _sub_tokens(s.turns)
            else:
                total += s.prompt_tokens + s.completion_tokens
    return total


def first_program_family(turns: Iterable[TurnStat]) -> str | None:
    """The family of the first root-turn program that is some family's reference program (the nearest reference
    body, tasks/reference.program_family), or None when the model never wrote one."""
    return next((f for t in turns for b in t.code_blocks if (f := program_family(b)) is not None), None)


def episode_row(res: EpisodeResult) -> dict[str, Any]:
    """The numbers of one episode (the result itself is kept beside it for the report)."""
    family, length = describe(res.task_id or "")
    length = bucket_length(length)
    scorable = res.status == "done" and res.reward is not None
    rc = res.reward_components
    all_turns = list(_walk_turns(res.turns))
    depth = Counter(str(s.depth) for s in _walk_subcalls(res.turns))
    root_tokens = sum(t.prompt_tokens + t.completion_tokens for t in res.turns)
    return {
        "task_id": res.task_id, "episode_id": res.episode_id, "family": family, "length": length,
        "scorable": scorable, "correct": bool(rc.correct) if (scorable and rc) else None,
        "reward": res.reward if scorable else None,
        "stop_reason": res.stop_reason if scorable else "error", "error": None if scorable else res.error,
        "answer": res.answer,
        "total_tokens": res.total_tokens, "root_tokens": root_tokens, "sub_tokens": _sub_tokens(res.turns),
        "root_turns": len(res.turns), "subcalls_by_depth": dict(sorted(depth.items())),
        "llm_calls": res.llm_calls, "program_family": first_program_family(res.turns),
        "repl_errors": sum(repl_error(o) for t in all_turns for o in t.outputs),
        "no_code_turns": sum(t.no_code for t in all_turns),
        "truncated_turns": sum(t.finish_reason == "length" for t in all_turns),
        "format_failure": bool(scorable and rc is not None and rc.format <= 0),
        "wall_s": res.wall_s,
    }


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _rate(rs: list[dict[str, Any]]) -> dict[str, Any]:
    k = sum(bool(r["correct"]) for r in rs)
    return {"correct": k, "n": len(rs), "pass@1": k / len(rs) if rs else None}


def selectivity(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Does the model recurse where it pays? Over scorable episodes: llm() calls per episode, the share of episodes
    that called llm() at all, pass@1 of the episodes with and without sub-calls, and sub-call tokens per episode."""
    ok = [r for r in rows if r["scorable"]]
    called = [r for r in ok if r["llm_calls"] > 0]
    return {
        "episodes": len(ok),
        "llm_calls_per_episode": _mean([r["llm_calls"] for r in ok]),
        "called_share": len(called) / len(ok) if ok else None,
        "with_subcalls": _rate(called),
        "without_subcalls": _rate([r for r in ok if r["llm_calls"] == 0]),
        "sub_tokens_per_episode": _mean([r["sub_tokens"] for r in ok]),
    }


def routing(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Did the model pick its task's kind of program? Per generated family, over scorable episodes: how many wrote a
    program of their own family's kind, and the family of what the others wrote ("none": no family's program).
    A family that is never routed right cannot be solved, however well the model writes the right program."""
    out: dict[str, Any] = {}
    for fam in FAMILIES:
        rs = [r for r in rows if r["scorable"] and r["family"] == fam]
        if rs:
            own = sum(r.get("program_family") == fam for r in rs)
            wrote = Counter(r.get("program_family") or "none" for r in rs if r.get("program_family") != fam)
            out[fam] = {"n": len(rs), "own": own, "share": own / len(rs), "wrote": dict(sorted(wrote.items()))}
    return out


def summarize(rows: list[dict[str, Any]], *, max_model_len: int, boot: dict[str, Any] | None = None) -> dict[str, Any]:
    """pass@1 overall, by family and by context-length bucket; tokens, sub-calls, errors and stop reasons.

    `max_model_len` marks buckets whose context (at ~CHARS_PER_TOKEN characters a token) is beyond
    the model's own window: there only the REPL, not the prompt, can hold the document.
    """
    boot = boot or {}
    ok = [r for r in rows if r["scorable"]]

    def p1(rs: list[dict[str, Any]]) -> dict[str, Any]:
        return pass_at_1([bool(r["correct"]) for r in rs], **boot)

    fam: dict[str, list] = defaultdict(list)
    lens: dict[int, list] = defaultdict(list)
    for r in ok:
        fam[r["family"]].append(r)
        lens[r["length"]].append(r)
    beyond = lambda length: length / CHARS_PER_TOKEN > max_model_len  # noqa: E731 - a one-line helper used right below
    depth_total: Counter = Counter()
    for r in ok:
        depth_total.update(r["subcalls_by_depth"])
    n_ok = len(ok)
    return {
        "n": len(rows), "scorable": n_ok, "unscorable": len(rows) - n_ok,
        "unscorable_episodes": [{"task_id": r["task_id"], "error": r["error"]} for r in rows if not r["scorable"]],
        "pass@1": p1(ok),
        "mean_reward": _mean([r["reward"] for r in ok]),
        "by_family": {f: p1(rs) for f, rs in sorted(fam.items())},
        "by_length": [
            {"bucket": length_tag(length), "length": length, "est_tokens": length // CHARS_PER_TOKEN,
             "beyond_window": beyond(length), **p1(rs)} for length, rs in sorted(lens.items())
        ],
        "window": {"max_model_len": max_model_len,
                   "within": p1([r for r in ok if not beyond(r["length"])]),
                   "beyond": p1([r for r in ok if beyond(r["length"])])},
        "tokens": {"mean_total": _mean([r["total_tokens"] for r in ok]),
                   "mean_root": _mean([r["root_tokens"] for r in ok]),
                   "mean_sub": _mean([r["sub_tokens"] for r in ok])},
        "subcalls_by_depth": {d: {"total": c, "mean_per_episode": c / n_ok} for d, c in sorted(depth_total.items())},
        "selectivity": {"all": selectivity(ok), "by_family": {f: selectivity(rs) for f, rs in sorted(fam.items())}},
        "routing": routing(ok),
        "repl_errors": {"total": sum(r["repl_errors"] for r in ok),
                        "episodes": sum(r["repl_errors"] > 0 for r in ok)},
        "format": {"no_code_turns": sum(r["no_code_turns"] for r in ok),
                   "truncated_turns": sum(r["truncated_turns"] for r in ok),
                   "format_failure_episodes": sum(r["format_failure"] for r in ok)},
        "stop_reasons": dict(sorted(Counter(r["stop_reason"] or "none" for r in rows).items())),
        "mean_wall_s": _mean([r["wall_s"] for r in rows]),
    }
