"""Selectivity: llm() calls per episode, share of episodes that called it, pass@1 with and without sub-calls and
sub-call tokens, per family, on a hand-built set of episodes."""

from __future__ import annotations

import pytest

from fathom.eval.metrics import episode_row, selectivity, summarize
from fathom.protocol import EpisodeResult, SubCall, TurnStat
from tests.unit.eval.episodes import rc


def _ep(task_id: str, correct: bool | None, calls: list[tuple[int, int]]) -> EpisodeResult:
    """An episode whose one root turn sent a plain llm() per (prompt_tokens, completion_tokens); correct None:
    unscorable."""
    subs = [SubCall(depth=1, prompt_chars=300, prompt_preview="passage", response="Lisbon", prompt_tokens=p,
                    completion_tokens=c) for p, c in calls]
    turns = [TurnStat(index=0, completion="```repl\nFINAL(llm(x))\n```", code_blocks=["FINAL(llm(x))"], outputs=[""],
                      prompt_tokens=500, completion_tokens=40, subcalls=subs)]
    if correct is None:
        return EpisodeResult(episode_id=f"e-{task_id}", task_id=task_id, status="error", stop_reason="error",
                             error="proxy unreachable", turns=turns, llm_calls=len(subs))
    return EpisodeResult(episode_id=f"e-{task_id}", task_id=task_id, status="done", stop_reason="final",
                         answer="Lisbon", reward=rc(correct).total, reward_components=rc(correct), turns=turns,
                         total_tokens=540 + sum(p + c for p, c in calls), llm_calls=len(subs))


EPISODES = [
    _ep("bios-4k-s1", True, [(100, 5)]),
    _ep("bios-4k-s2", True, [(120, 3), (80, 2)]),
    _ep("bios-4k-s3", False, [(90, 30)]),
    _ep("bios-4k-s4", False, []),
    _ep("bios-4k-s5", None, [(50, 5)]),  # unscorable: in no figure
    _ep("needle-4k-s1", True, []),
    _ep("needle-4k-s2", True, []),
    _ep("needle-4k-s3", False, [(200, 10)]),
]


def test_selectivity_per_family_on_hand_built_episodes() -> None:
    s = summarize([episode_row(e) for e in EPISODES], max_model_len=4096)["selectivity"]
    bios, needle = s["by_family"]["bios"], s["by_family"]["needle"]
    assert bios["episodes"] == 4
    assert bios["llm_calls_per_episode"] == pytest.approx(4 / 4)
    assert bios["called_share"] == pytest.approx(3 / 4)
    assert bios["with_subcalls"] == {"correct": 2, "n": 3, "pass@1": pytest.approx(2 / 3)}
    assert bios["without_subcalls"] == {"correct": 0, "n": 1, "pass@1": 0.0}
    assert bios["sub_tokens_per_episode"] == pytest.approx((105 + 205 + 120 + 0) / 4)
    assert needle["llm_calls_per_episode"] == pytest.approx(1 / 3) and needle["called_share"] == pytest.approx(1 / 3)
    assert needle["with_subcalls"]["pass@1"] == 0.0 and needle["without_subcalls"]["pass@1"] == 1.0
    assert s["all"]["episodes"] == 7 and s["all"]["llm_calls_per_episode"] == pytest.approx(5 / 7)
    assert s["all"]["called_share"] == pytest.approx(4 / 7)


def test_no_episodes_gives_none_not_zero() -> None:
    empty = selectivity([])
    assert empty["llm_calls_per_episode"] is None and empty["called_share"] is None
    assert empty["with_subcalls"]["pass@1"] is None


def test_fathom_eval_prints_each_familys_selectivity(capsys) -> None:
    from fathom.entrypoints.eval_cmd import _print

    s = summarize([episode_row(e) for e in EPISODES], max_model_len=4096)
    _print({"models": {"sft": {"summary": s}}, "comparisons": []}, {})
    out = capsys.readouterr().out.splitlines()
    assert out[1] == ("  bios: llm() in 75% of 4 episodes, 1.00 calls and 108 sub-call tokens an episode; "
                      "right 2/3 with sub-calls, 0/1 without")
    assert out[2].startswith("  needle: llm() in 33% of 3 episodes, 0.33 calls")
