"""The REPL's helper toolbox (grep, line_at, window, chunks): what it returns, and that it is sandboxed code."""

from __future__ import annotations

import pytest

from fathom.env_server.sandbox import toolbox
from fathom.env_server.server.prompts import SYSTEM_PROMPT

CTX = "alpha 1\nbeta 2\nAlpha 3\ngamma beta 4"


@pytest.fixture
def tb(pool):
    e = pool.new_episode(CTX)
    yield e
    e.close()


def _out(ep, code: str) -> str:
    res = ep.run(code)
    assert res.error is None, res.error
    return res.stdout


def test_grep_returns_each_matching_line_once(tb) -> None:
    assert _out(tb, "print(grep('beta'))") == "['beta 2', 'gamma beta 4']\n"
    assert _out(tb, "print(grep('(?i)alpha|beta'))") == "['alpha 1', 'beta 2', 'Alpha 3', 'gamma beta 4']\n"
    assert _out(tb, "print(grep('a', 'xa\\nya a\\nz'))") == "['xa', 'ya a']\n"  # two hits on a line: one line
    assert _out(tb, "print(grep('nothing'), grep('', ''))") == "[] ['']\n"


def test_line_at_window_and_chunks(tb) -> None:
    assert _out(tb, "print(line_at(9), line_at(0), repr(line_at(10 ** 9)))") == "beta 2 alpha 1 'gamma beta 4'\n"
    assert _out(tb, "print(repr(window(9, 3)), repr(window(1, 5)), repr(window(-50, 3)))") == \
        "'1\\nbeta' 'alpha ' ''\n"
    assert _out(tb, "print(chunks(10)[:2], len(chunks()), chunks(3, 'abcdefg'))") == \
        "['alpha 1\\nbe', 'ta 2\\nAlpha'] 1 ['abc', 'def', 'g']\n"


def test_helpers_read_the_episodes_context_even_when_the_name_is_rebound(tb) -> None:
    assert _out(tb, "context = 'other'\nprint(grep('gamma'))") == "['gamma beta 4']\n"
    assert _out(tb, "grep = 3\nprint(grep, window(0, 2))") == "3 al\n"  # shadowing a helper breaks nothing else


@pytest.mark.parametrize("code, needle", [
    ("grep(3)", "TypeError: grep() takes a str regular expression"),
    ("grep('(')", "error"),
    ("grep('a', 5)", "TypeError: text must be a str"),
    ("line_at('3')", "TypeError: pos and size must be int"),
    ("window(0, -1)", "ValueError: window() size must be 0 or more"),
    ("chunks(0)", "ValueError: chunks() size must be 1 or more"),
    ("chunks(1, 'a' * 200001)", "use a size of at least 3"),
])
def test_bad_arguments_get_clear_errors(tb, code: str, needle: str) -> None:
    res = tb.run(code)
    assert res.error is not None and needle in res.error, res.error
    assert "<toolbox>" not in res.error  # the traceback shows the model's lines only


def test_helpers_are_hidden_from_show_vars_and_final_var(tb) -> None:
    assert _out(tb, "print(sorted(SHOW_VARS()))") == "['context']\n"
    assert "no variable named 'grep'" in tb.run("FINAL_VAR('grep')").error


def test_system_prompt_lists_every_helper() -> None:
    for name in toolbox.NAMES:
        assert f"`{name}(" in SYSTEM_PROMPT
    assert toolbox.DESCRIPTION in SYSTEM_PROMPT


def test_preloaded_variables_cannot_take_a_helpers_name(pool) -> None:
    with pytest.raises(ValueError, match="grep"):
        pool.new_episode("x", variables={"grep": "y"})
