"""Reward components and the anti-reward-hacking audit (docs/reward_audit.md lists each attack)."""

from __future__ import annotations

import re

import pytest

from fathom.config import ConfigError, load_config
from fathom.config.tasks import RewardConfig
from fathom.tasks import FAMILIES, generate, score
from fathom.tasks.reward import normalize

CFG = RewardConfig()


def ok(task, answer, **kw):
    args = {"via_final": True, "total_tokens": 100, "llm_calls": 0, "final_calls": 1} | kw
    return score(task, answer, **args)


@pytest.fixture(scope="module")
def tasks():
    return {f: generate(f, 2, 32768) for f in FAMILIES}


def pair_answer(task) -> str:
    return "; ".join("(" + p.replace("|", ", ") + ")" for p in task.gold.items)


def correct_answer(task) -> str:
    return pair_answer(task) if task.family == "pairs" else task.gold.answer


# --- components -------------------------------------------------------------------------------

def test_correct_answer_scores_all_components(tasks) -> None:
    for t in tasks.values():
        rc = ok(t, correct_answer(t))
        assert rc.correct and rc.correctness == 1.0 and rc.format == 1.0
        assert rc.token_budget == 0.0 and rc.recursion == 1.0 and 0 < rc.tool_bonus <= 1
        want = CFG.correctness + CFG.format + CFG.recursion + CFG.tool_bonus * rc.tool_bonus
        assert rc.total == pytest.approx(want, abs=1e-6)


def test_token_budget_penalty_scales_with_overspend(tasks) -> None:
    t = tasks["needle"]
    b = t.metadata.token_budget
    assert ok(t, t.gold.answer, total_tokens=b).token_budget == 0.0
    assert ok(t, t.gold.answer, total_tokens=int(b * 1.5)).token_budget == pytest.approx(-0.5, abs=1e-3)
    assert ok(t, t.gold.answer, total_tokens=b * 10).token_budget == -1.0
    over = ok(t, t.gold.answer, total_tokens=b * 10)
    assert over.correct and over.total < ok(t, t.gold.answer, total_tokens=b).total


def test_recursion_decays_linearly_and_only_when_correct(tasks) -> None:
    t = tasks["kv_chain"]
    vals = [ok(t, t.gold.answer, llm_calls=n).recursion for n in (0, 4, 8, 16, 20)]
    assert vals == [1.0, 0.75, 0.5, 0.0, 0.0]
    assert ok(t, "1", llm_calls=0).recursion == 0.0


def test_tool_bonus_only_when_correct_and_gives_contrast(tasks) -> None:
    t = tasks["code_qa"]
    b = t.metadata.token_budget
    lean, heavy = ok(t, t.gold.answer, total_tokens=b // 10), ok(t, t.gold.answer, total_tokens=b - 1)
    assert lean.tool_bonus > heavy.tool_bonus and lean.total > heavy.total
    assert CFG.tool_bonus * lean.tool_bonus <= 0.1
    assert ok(t, "wrong", total_tokens=1).tool_bonus == 0.0


def test_format_requires_final(tasks) -> None:
    t = tasks["needle"]
    rc = ok(t, t.gold.answer, via_final=False, final_calls=0)
    assert rc.format == 0.0 and rc.correct


def test_weights_come_from_config(tasks) -> None:
    t = tasks["needle"]
    cfg = load_config(None, ["tasks.reward.correctness=0.9", "tasks.reward.format=0.0"]).tasks.reward
    rc = score(t, t.gold.answer, via_final=True, total_tokens=1, llm_calls=16, cfg=cfg)
    assert rc.total == pytest.approx(0.9 + cfg.tool_bonus * rc.tool_bonus, abs=1e-6)


def test_config_rejects_unsafe_weights() -> None:
    with pytest.raises(ConfigError, match="tool_bonus"):
        load_config(None, ["tasks.reward.tool_bonus=0.5"])
    with pytest.raises(ConfigError, match="wrong_ceiling"):
        load_config(None, ["tasks.reward.correctness=0.2"])


def test_numeric_forms_and_tolerance(tasks) -> None:
    t = tasks["needle"]
    g = t.gold.answer
    for form in (g, f" {g}. ", f"Answer: {g}", f"'{g}'", f"{int(g):,}", f"{g}.0"):
        assert ok(t, form).correct, form
    assert not ok(t, str(int(g) + 1)).correct
    loose = RewardConfig(numeric_abs_tol=1.0)
    assert score(t, str(int(g) + 1), via_final=True, total_tokens=1, llm_calls=0, cfg=loose).correct


def test_set_f1_partial_credit_is_capped(tasks) -> None:
    t = tasks["pairs"]
    assert len(t.gold.items) >= 2
    half = "; ".join("(" + p.replace("|", ", ") + ")" for p in t.gold.items[:1])
    rc = ok(t, half)
    assert 0 < rc.correctness < 1 and not rc.correct and rc.total <= CFG.wrong_ceiling
    swapped = "; ".join("(" + ", ".join(reversed(p.split("|"))) + ")" for p in t.gold.items)
    assert ok(t, swapped).correct  # order inside a pair and between pairs does not matter


def test_bad_inputs_name_the_problem(tasks) -> None:
    t = tasks["needle"]
    with pytest.raises(ValueError, match="total_tokens"):
        score(t, "1", via_final=True, total_tokens=-1, llm_calls=0)
    with pytest.raises(ValueError, match="answer must be"):
        score(t, ["1"], via_final=True, total_tokens=1, llm_calls=0)  # type: ignore[arg-type]
    assert score(t, int(t.gold.answer), via_final=True, total_tokens=1, llm_calls=0).correct  # type: ignore[arg-type]


def test_normalize() -> None:
    assert normalize('  "The answer is:  Ada  Baird." ') == "ada baird"
    assert normalize("`pkg/mod.py`") == "pkg/mod.py"


# --- the audit: none of these may score as correct, nor above the ceiling ------------------------

def _assert_not_correct(task, answer, **kw) -> None:
    rc = ok(task, answer, **kw)
    assert not rc.correct, (task.id, answer[:80] if answer else answer)
    assert rc.total <= CFG.wrong_ceiling + 1e-9


@pytest.mark.parametrize("family", FAMILIES)
def test_audit_empty_and_missing(tasks, family) -> None:
    for answer in ("", "   ", "\n", None):
        _assert_not_correct(tasks[family], answer)


@pytest.mark.parametrize("family", FAMILIES)
def test_audit_question_echo(tasks, family) -> None:
    _assert_not_correct(tasks[family], tasks[family].question)


@pytest.mark.parametrize("family", FAMILIES)
def test_audit_whole_context(tasks, family) -> None:
    _assert_not_correct(tasks[family], tasks[family].context)


@pytest.mark.parametrize("family", FAMILIES)
def test_audit_format_only(tasks, family) -> None:
    for answer in ("FINAL()", "FINAL(answer)", "```repl\n```", "{answer}", "<answer></answer>", "Answer:", "[]", "None"):
        _assert_not_correct(tasks[family], answer)


@pytest.mark.parametrize("family", FAMILIES)
def test_audit_final_spam(tasks, family) -> None:
    t = tasks[family]
    rc = ok(t, correct_answer(t), final_calls=5)
    assert not rc.correct and rc.format == 0.0 and rc.total <= CFG.wrong_ceiling


@pytest.mark.parametrize("family", FAMILIES)
def test_audit_recursion_spam(tasks, family) -> None:
    t = tasks[family]
    rc = ok(t, correct_answer(t), llm_calls=CFG.max_llm_calls + 1)
    assert not rc.correct and rc.recursion == 0.0 and rc.total <= CFG.wrong_ceiling


@pytest.mark.parametrize("family", FAMILIES)
def test_audit_every_number_or_name(tasks, family) -> None:
    t = tasks[family]
    numbers = " ".join(dict.fromkeys(re.findall(r"\d+", t.context)))
    names = ", ".join(dict.fromkeys(re.findall(r"[A-Z][a-z]+ [A-Z][a-z]+|[a-z]+_[a-z]+_[a-z]+|[\w/]+\.py", t.context)))
    ids = " ".join(dict.fromkeys(re.findall(r"R\d{6}", t.context)))
    for answer in (numbers, names, ids):
        _assert_not_correct(t, answer)


@pytest.mark.parametrize("family", FAMILIES)
def test_audit_over_long(tasks, family) -> None:
    t = tasks[family]
    gold = correct_answer(t)
    _assert_not_correct(t, gold + " " * 10 + "x" * max(CFG.answer_min_cap, int(len(gold) * CFG.answer_len_factor)))


@pytest.mark.parametrize("family", FAMILIES)
def test_audit_contains_gold(tasks, family) -> None:
    t = tasks[family]
    gold = correct_answer(t)
    for answer in (f"It is either {gold} or 12", f"{gold} or maybe {gold}0", f"not {gold}"):
        if t.family == "pairs":
            answer = gold + "; (R999998, R999999)"  # the right pairs plus a guess
        _assert_not_correct(t, answer)


def test_audit_every_pair_guessed() -> None:
    t = generate("pairs", 2, 8192)
    ids = re.findall(r"R\d{6}", t.context)
    every = "; ".join(f"({a}, {b})" for i, a in enumerate(ids) for b in ids[i + 1:i + 4])
    cfg = RewardConfig(answer_len_factor=1000.0)  # even with no length cap, low precision fails
    assert not score(t, every, via_final=True, total_tokens=1, llm_calls=0, cfg=cfg).correct
