"""Reward: correctness, format, token budget, recursion efficiency and a tool-efficiency bonus.

Each component is returned separately. Correctness is strict on purpose (see
docs/reward_audit.md): normalised exact match, a single number within tolerance, or set F1
over parsed pairs; containment, over-long answers, FINAL spam and recursion spam never count.
"""

from __future__ import annotations

import math
import re

from fathom.config.tasks import RewardConfig
from fathom.protocol import RewardComponents
from fathom.tasks.record import Gold, Task

_PREFIX = re.compile(r"^\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is)?\s*[:=]?\s*", re.I)
_WRAP = {'"': '"', "'": "'", "`": "`", "(": ")", "[": "]", "{": "}", "<": ">"}
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_RECORD_ID = re.compile(r"\bR\d{6}\b", re.I)


def normalize(text: str) -> str:
    """Casefold, drop an `answer:` label, wrapping quotes/brackets, trailing punctuation and extra spaces."""
    s, prev = text.strip(), None
    while s != prev:  # peel labels, wrappers and end punctuation in any nesting order
        prev = s
        s = _PREFIX.sub("", s, count=1).strip().rstrip(".!;,").strip()
        if len(s) >= 2 and _WRAP.get(s[0]) == s[-1]:
            s = s[1:-1].strip()
    return " ".join(s.casefold().split())


def _number(text: str) -> float | None:
    s = re.sub(r"(?<=\d),(?=\d{3}\b)", "", normalize(text))
    return float(s) if _NUMBER.fullmatch(s) else None


def _pairs(text: str) -> list[str]:
    ids = [m.upper() for m in _RECORD_ID.findall(text)]
    out = ["|".join(sorted(ids[i:i + 2])) for i in range(0, len(ids) - 1, 2)]
    if len(ids) % 2:
        out.append(ids[-1])  # a dangling id is a wrong element, not silently dropped
    return out


def set_f1(gold: Gold, answer: str) -> float:
    if gold.items and all("|" in x for x in gold.items):
        pred = set(_pairs(answer))
        want = set(gold.items)
    else:
        pred = {normalize(p) for p in re.split(r"[;\n]", answer) if normalize(p)}
        want = {normalize(x) for x in (gold.items or re.split(r"[;\n]", gold.answer))}
    hit = len(pred & want)
    if not pred or not want or not hit:
        return 0.0
    p, r = hit / len(pred), hit / len(want)
    return 2 * p * r / (p + r)


def match(gold: Gold, answer: str | None, cfg: RewardConfig) -> float:
    """Correctness in [0, 1] before the gates: 1/0 for numbers and strings, F1 for sets."""
    if answer is None or not answer.strip():
        return 0.0
    if len(answer) > max(cfg.answer_min_cap, cfg.answer_len_factor * len(gold.answer)):
        return 0.0
    if gold.type == "set":
        return set_f1(gold, answer)
    if gold.type == "number":
        got = _number(answer)
        if got is None:
            return 0.0
        for g in [gold.answer, *gold.aliases]:
            want = _number(g)
            if want is not None and math.isclose(got, want, rel_tol=cfg.numeric_rel_tol, abs_tol=cfg.numeric_abs_tol):
                return 1.0
        return 0.0
    got = normalize(answer)
    return 1.0 if got and got in {normalize(g) for g in [gold.answer, *gold.aliases]} else 0.0


def score(task: Task, answer: str | None, *, via_final: bool, total_tokens: int, llm_calls: int,
          final_calls: int = 1, cfg: RewardConfig | None = None) -> RewardComponents:
    """Score one finished episode. `answer` is None when the episode produced none (that scores, as wrong).

    An episode that crashed is unscorable and must not be passed here: its reward is None upstream.
    """
    cfg = cfg or RewardConfig()
    for name, v in (("total_tokens", total_tokens), ("llm_calls", llm_calls), ("final_calls", final_calls)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"score(): {name}={v!r} must be a non-negative integer (task {task.id})")
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        answer = str(answer)  # FINAL(42) from the sandbox
    if answer is not None and not isinstance(answer, str):
        raise ValueError(f"score(): answer must be a string or None, got {type(answer).__name__} (task {task.id})")
    final_spam = final_calls > cfg.max_final_calls
    recursion_spam = llm_calls > cfg.max_llm_calls
    c = 0.0 if final_spam or recursion_spam else match(task.gold, answer, cfg)
    threshold = cfg.set_f1_correct if task.gold.type == "set" else 1.0
    correct = c >= threshold and not final_spam and not recursion_spam
    fmt = 1.0 if via_final and final_calls >= 1 and not final_spam else 0.0
    budget = max(1.0, task.metadata.token_budget * cfg.token_budget_scale)
    penalty = -min(1.0, max(0.0, (total_tokens - budget) / budget))
    recursion = max(0.0, 1.0 - llm_calls / cfg.recursion_max_calls) if correct else 0.0
    bonus = max(0.0, 1.0 - total_tokens / budget) if correct else 0.0
    total = (cfg.correctness * c + cfg.format * fmt + cfg.token_budget * penalty
             + cfg.recursion * recursion + cfg.tool_bonus * bonus)
    if not correct:
        total = min(total, cfg.wrong_ceiling)
    return RewardComponents(correctness=c, format=fmt, token_budget=penalty, recursion=recursion,
                            tool_bonus=bonus, total=round(total, 6), correct=correct)
