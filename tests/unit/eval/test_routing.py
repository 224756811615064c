"""Routing: which kind of program a model wrote for each family, read from its first program's body, on hand-built
episodes."""

from __future__ import annotations

from fathom.eval.metrics import episode_row, summarize
from fathom.protocol import EpisodeResult, TurnStat
from fathom.tasks import generate, reference_solution
from tests.unit.eval.episodes import rc


def _program(family: str) -> str:
    return reference_solution(generate(family, 7, 4096).question)


def _ep(task_id: str, blocks: list[list[str]], correct: bool | None = False) -> EpisodeResult:
    """An episode with one root turn per entry of `blocks` (that turn's code blocks); correct None: unscorable."""
    turns = [TurnStat(index=i, code_blocks=b, outputs=[""] * len(b)) for i, b in enumerate(blocks)]
    if correct is None:
        return EpisodeResult(episode_id=f"e-{task_id}", task_id=task_id, status="error", stop_reason="error",
                             error="sandbox died", turns=turns)
    return EpisodeResult(episode_id=f"e-{task_id}", task_id=task_id, status="done", stop_reason="final",
                         reward=rc(correct).total, reward_components=rc(correct), turns=turns)


def test_routing_reads_each_familys_first_program() -> None:
    look = "print(len(context))\nprint(context[:300])"
    episodes = [
        _ep("kv_chain-4k-s1", [[_program("kv_chain")]], True),
        _ep("kv_chain-4k-s2", [[_program("needle")]]),  # the needle program for a chain: routed wrong
        _ep("kv_chain-4k-s3", [[look], [_program("needle")]]),  # a look first, then the needle program
        _ep("kv_chain-4k-s4", [[look]]),  # no program of any family at all
        _ep("kv_chain-4k-s5", [[_program("kv_chain")]], None),  # unscorable: in no figure
        _ep("pairs-4k-s1", [[_program("aggregate"), _program("pairs")]]),  # the first block decides
        _ep("code_qa-4k-s1", [["x = 1"], [_program("code_qa")]], True),
    ]
    r = summarize([episode_row(e) for e in episodes], max_model_len=4096)["routing"]
    assert r["kv_chain"] == {"n": 4, "own": 1, "share": 0.25, "wrote": {"needle": 2, "none": 1}}
    assert r["pairs"] == {"n": 1, "own": 0, "share": 0.0, "wrote": {"aggregate": 1}}
    assert r["code_qa"] == {"n": 1, "own": 1, "share": 1.0, "wrote": {}}
    assert set(r) == {"kv_chain", "pairs", "code_qa"}  # families with no scorable episode are left out


def test_fathom_eval_prints_the_routing(capsys) -> None:
    from fathom.entrypoints.eval_cmd import _print

    episodes = [_ep("kv_chain-4k-s1", [[_program("kv_chain")]], True), _ep("kv_chain-4k-s2", [[_program("needle")]])]
    _print({"models": {"sft": {"summary": summarize([episode_row(e) for e in episodes], max_model_len=4096)}},
            "comparisons": []}, {})
    assert capsys.readouterr().out.splitlines()[-1] == "  wrote its family's program: kv_chain 1/2 (needle 1)"
