"""Real `EpisodeResult` objects shaped like the env server's, for eval unit tests."""

from __future__ import annotations

from fathom.protocol import EpisodeResult, RewardComponents, SubCall, TurnStat


def rc(correct: bool, fmt: float = 1.0) -> RewardComponents:
    total = 0.95 if correct else 0.05
    return RewardComponents(correctness=float(correct), format=fmt, token_budget=0.0, recursion=1.0 if correct else 0.0,
                            tool_bonus=0.1 if correct else 0.0, total=total, correct=correct)


def episode(task_id: str, outcome: str, *, eid: str | None = None, tokens: int = 300, deep: bool = False,
            repl_error: bool = False, no_code: bool = False) -> EpisodeResult:
    """outcome: correct | wrong | unscorable."""
    nested = [TurnStat(index=0, depth=1, completion="```repl\nFINAL(context[:5])\n```", code_blocks=["FINAL(context[:5])"],
                       outputs=[""], final_answer="hello", prompt_tokens=40, completion_tokens=10)]
    subs = [SubCall(depth=1, prompt_chars=500, prompt_preview="Summarise </script><b>x</b>", response="a summary",
                    prompt_tokens=60, completion_tokens=20)]
    if deep:
        subs.append(SubCall(depth=1, prompt_chars=9000, prompt_preview="long", turns=nested, response="hello"))
    out = "Traceback (most recent call last):\n  line 1, in <module>\nNameError: name 'x' is not defined" if repl_error else "42"
    turns = [TurnStat(index=0, completion="```repl\nprint(len(context))\n```", code_blocks=["print(len(context))"],
                      outputs=[out], finish_reason="stop", prompt_tokens=tokens - 100, completion_tokens=20,
                      subcalls=subs)]
    if no_code:
        turns.append(TurnStat(index=1, completion="I think it is 4.", no_code=True, finish_reason="length",
                              prompt_tokens=0, completion_tokens=0))
    if outcome == "unscorable":
        return EpisodeResult(episode_id=eid or f"e-{task_id}", task_id=task_id, status="error", stop_reason="error",
                             error="could not open a capture session: proxy unreachable", turns=turns, total_tokens=tokens)
    return EpisodeResult(episode_id=eid or f"e-{task_id}", task_id=task_id, status="done", stop_reason="final",
                         answer="42", reward=rc(outcome == "correct").total,
                         reward_components=rc(outcome == "correct", fmt=0.0 if no_code else 1.0), turns=turns,
                         total_tokens=tokens, llm_calls=len(subs), wall_s=1.5)
