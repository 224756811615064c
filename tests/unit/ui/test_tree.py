"""The page's tree: harness events in, HTML snapshots out (pending, running and finished nodes), and the result panel."""

from __future__ import annotations

import re
import threading

from fathom import tasks
from fathom.env_server.server import prompts
from fathom.protocol import RewardComponents, SubCall, TurnStat
from fathom.ui.app import read_document
from fathom.ui.live import LiveEpisode, gold_task
from fathom.ui.tree import Outcome, render_result, render_tree, walk
from tests.unit.env_server.test_harness import repl, run


def kinds(html: str) -> list[str]:
    return re.findall(r'data-kind="(\w+)"', html)


def latest(live: LiveEpisode) -> str:
    """The snapshot the page gets after one event."""
    got = list(live.updates(lambda: True, poll_s=0.001))
    assert len(got) == 1
    return got[0]


def test_each_event_renders_the_tree_so_far():
    live = LiveEpisode()
    t = TurnStat(index=0, depth=0, prompt_tokens=120, completion_tokens=30, completion="x",
                 code_blocks=["r = llm(context[:10])\nprint(r)"])
    live.turns.append(t)
    live.on_event("turn", t)
    html = latest(live)
    assert live.first_turn_at is not None
    assert "running code…" in html and "r = llm(context[:10])" in html and 'pre class="output"' not in html
    s = SubCall(depth=1, prompt_chars=10, prompt_preview="0123456789")
    t.subcalls.append(s)
    live.on_event("subcall", s)
    html = latest(live)
    assert 'data-state="pending"' in html and "waiting for the model…" in html
    s.response, s.call_id, s.prompt_tokens, s.completion_tokens = "ten digits", "c2", 12, 3
    live.on_event("subcall_done", s)
    html = latest(live)
    assert 'data-state="done"' in html and "→ ten digits" in html
    t.outputs.append("ten digits\n")
    live.on_event("output", t)
    html = latest(live)
    assert "running code…" not in html and 'pre class="output">ten digits' in html
    assert kinds(html)[-1] == "waiting"  # the root waits on the model for its next turn
    t2 = TurnStat(index=1, depth=0, completion=repl("FINAL('42')"), code_blocks=["FINAL('42')"])
    live.turns.append(t2)
    live.on_event("turn", t2)
    t2.outputs.append("")
    t2.final_answer = "42"
    live.on_event("final", t2)
    html = latest(live)  # two events, one snapshot: the newest
    assert kinds(html) == ["turn", "subcall", "turn"] and "FINAL: 42" in html and 'data-turns="2"' in html


def test_a_real_harness_streams_nested_episodes_depth_by_depth():
    """Events from the harness itself (fake model and sandbox): the last snapshot is the finished tree."""
    def model(messages):
        if messages[0]["role"] != "system":
            return "plain"
        if messages[1]["content"].startswith(f"Question: {prompts.NESTED_QUESTION}"):
            return repl("print(llm('leaf'))\nFINAL(context[:3])")
        if len(messages) == 2:
            return repl(f"print(llm({'x' * 150!r}))")
        return repl("FINAL('done')")

    live = LiveEpisode()
    snaps: list[str] = []
    done = threading.Event()
    consumer = threading.Thread(target=lambda: snaps.extend(live.updates(done.is_set)))
    consumer.start()
    out, turns, *_ = run(model, cfg={"sub_rlm_min_chars": 100}, on_event=live.on_event, turns=live.turns)
    done.set()
    consumer.join(5)
    assert out.answer == "done" and snaps
    final = render_tree(turns)
    assert kinds(final) == ["turn", "subcall", "turn", "subcall", "turn"]
    assert re.findall(r'data-depth="(\d)"', final) == ["0", "1", "1", "2", "0"]
    assert "nested episode · depth 1" in final and "llm() · depth 2" in final and "→ plain" in final
    # the consumer saw the root turn before the episode ended, and the last snapshot is the whole tree
    assert "depth 0 · turn 1" in snaps[0] and "FINAL: done" not in snaps[0]
    assert snaps[-1].replace(' data-turns="2"', "") == render_tree(turns, running=True).replace(' data-turns="2"', "")


def test_model_text_is_escaped():
    t = TurnStat(index=0, completion="<script>alert(1)</script>", no_code=True,
                 subcalls=[SubCall(depth=1, prompt_chars=3, prompt_preview="<marquee>", response="<img src=x>")])
    html = render_tree([t])
    assert "<script>" not in html and "&lt;script&gt;" in html and "<img" not in html and "<marquee>" not in html
    assert "no code block" in html


def test_a_failed_subcall_and_long_text():
    t = TurnStat(index=0, code_blocks=["x"], outputs=["y" * 5000],
                 subcalls=[SubCall(depth=1, prompt_chars=5, prompt_preview="hello", error="too_long: send less")])
    html = render_tree([t])
    assert 'data-state="error"' in html and "failed: too_long" in html and "(1,000 more characters)" in html


def test_result_panel_tokens_and_reward():
    nested = SubCall(depth=1, prompt_chars=9000, prompt_preview="p", response="r",
                     turns=[TurnStat(index=0, depth=1, prompt_tokens=50, completion_tokens=5)])
    plain = SubCall(depth=1, prompt_chars=5, prompt_preview="p", response="r", call_id="c", prompt_tokens=7,
                    completion_tokens=2)
    turns = [TurnStat(index=0, prompt_tokens=100, completion_tokens=20, subcalls=[nested, plain]),
             TurnStat(index=1, prompt_tokens=130, completion_tokens=10, final_answer="7")]
    assert walk(turns) == (4, 287, 37)
    rc = RewardComponents(correctness=1, format=1, token_budget=0, recursion=0.8, tool_bonus=0.5, total=0.95,
                          correct=True)
    html = render_result(Outcome("7", "final", 1.5, 2, 324, reward=rc), turns)
    assert "+0.950 (correct)" in html and "4 model calls (2 llm() prompts)" in html and "287 prompt + 37" in html
    html = render_result(Outcome(None, "max_turns", 3.0, 0, 10, reward_note="no expected answer was given"), turns)
    assert "did not call FINAL" in html and "No reward: no expected answer was given" in html
    assert 'data-kind="reward"' not in html
    html = render_result(Outcome(None, "error", 0.1, 0, 0, error="proxy unreachable"), [])
    assert "The episode failed: proxy unreachable" in html


def test_an_expected_answer_scores_with_the_task_verifier():
    t = gold_task("How many?", "doc " * 100, " 1,234 ")
    assert t.gold.type == "number" and t.metadata.length_chars == 400
    assert tasks.score(t, "1234", via_final=True, total_tokens=500, llm_calls=0).correct
    s = gold_task("Who?", "doc", "Ada Lovelace")
    assert s.gold.type == "string"
    assert tasks.score(s, "ada lovelace", via_final=True, total_tokens=500, llm_calls=0).correct
    assert not tasks.score(s, "Babbage", via_final=True, total_tokens=500, llm_calls=0).correct


def test_an_upload_wins_over_pasted_text(tmp_path):
    f = tmp_path / "doc.txt"
    f.write_bytes(b"caf\xc3\xa9 \xff end")
    assert read_document("pasted", str(f)) == "café \ufffd end"
    assert read_document("pasted", None) == "pasted" and read_document(None, None) == ""
