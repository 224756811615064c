"""The exact messages the model sees, and reply parsing."""

from __future__ import annotations

from fathom.env_server.server import prompts


def test_initial_messages_render_exactly():
    msgs = prompts.initial_messages("Who signed the memo?", "abcdefghij" * 100, preview_chars=25)
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert msgs[0]["content"] == prompts.SYSTEM_PROMPT
    assert msgs[1]["content"] == (
        "Question: Who signed the memo?\n\n"
        "`context` holds 1,000 characters. It begins:\n"
        '"""\nabcdefghijabcdefghijabcde [...]\n"""'
    )


def test_short_context_preview_is_whole_and_unmarked():
    msgs = prompts.initial_messages("Q?", "tiny", preview_chars=300)
    assert msgs[1]["content"].endswith('It begins:\n"""\ntiny\n"""')


def test_system_prompt_explains_every_tool():
    for word in ("`context`", "`question`", "```repl", "llm(prompt)", "llm_batch(prompts)", "FINAL(answer)",
                 "FINAL_VAR(name)"):
        assert word in prompts.SYSTEM_PROMPT


def test_repl_feedback_renders_exactly():
    assert prompts.repl_feedback(["42\n"], 3) == (
        "REPL output:\n```\n42\n\n```\n\nTurns left: 3. Write more ```repl code, or answer with FINAL(answer)."
    )
    two = prompts.repl_feedback(["a", "  "], 0)
    assert "REPL output of block 1:\n```\na\n```" in two and "REPL output of block 2:\n```\n(no output)\n```" in two


def test_code_blocks_accept_repl_python_and_bare_fences():
    text = "think\n```repl\nx = 1\n```\nthen\n```python\nprint(x)\n```\n```\ny = 2\n```\n```repl\n\n```"
    assert prompts.code_blocks(text) == ["x = 1\n", "print(x)\n", "y = 2\n"]
    assert prompts.code_blocks("```json\n{}\n```") == []


def test_text_final_forms():
    assert prompts.text_final('so\nFINAL("Paris")') == prompts.TextFinal(answer="Paris")
    assert prompts.text_final("FINAL(42)") == prompts.TextFinal(answer="42")
    assert prompts.text_final("FINAL(the blue one)") == prompts.TextFinal(answer="the blue one")
    assert prompts.text_final("FINAL_VAR(result)") == prompts.TextFinal(var="result")
    assert prompts.text_final("I will call FINAL(x) later") is None
    assert prompts.text_final("```repl\nFINAL('x')\n```") is None
