"""The episode API: persistence, output, FINAL, llm bridge, bad input, kills."""

from __future__ import annotations

import pytest

from fathom.config.sandbox import SandboxConfig
from fathom.env_server.sandbox import RunResult, SandboxError, SandboxPool


def test_variables_persist_and_context_is_preloaded(ep):
    assert ep.run("n = len(context)\nwords = context.split()").error is None
    res = ep.run("print(n, len(words), words[:2])")
    assert res.error is None
    assert res.stdout == "210 40 ['The', 'quick']\n"
    assert res.killed_reason is None and not res.truncated


def test_final_and_final_var(ep):
    res = ep.run("FINAL(6 * 7)")
    assert res.final_answer == "42" and ep.final_answer == "42"
    res = ep.run("ans = 'fox'\nFINAL_VAR('ans')")
    assert res.final_answer == "fox" and ep.final_answer == "fox"
    assert ep.run("print(1)").final_answer is None and ep.final_answer == "fox"
    res = ep.run("FINAL_VAR('nope')")
    assert "no variable named 'nope'" in res.error


def test_show_vars(ep):
    ep.run("import re\nhits = re.findall('fox', context)")
    res = ep.run("print(SHOW_VARS())")
    assert "'hits': 'list'" in res.stdout and "'re': 'module'" in res.stdout and "'context': 'str'" in res.stdout


def test_llm_and_llm_batch_reach_the_handler(ep):
    res = ep.run("a = llm('hi')\nb = llm_batch(['x', 'y'])\nprint(a, b)")
    assert res.stdout == "echo:hi ['echo:x', 'echo:y']\n"
    assert res.llm_calls == 3


def test_llm_handler_failure_is_an_exception_inside(pool):
    def boom(prompts):
        raise ConnectionError("proxy down")

    ep = pool.new_episode("", llm_handler=boom)
    try:
        res = ep.run("try:\n    llm('q')\nexcept RuntimeError as e:\n    print('caught', e)")
        assert "caught llm() failed: ConnectionError: proxy down" in res.stdout
        assert ep.alive
    finally:
        ep.close()


def test_llm_without_handler_is_a_clear_error(pool):
    ep = pool.new_episode("")
    try:
        res = ep.run("llm('q')")
        assert "llm() is not available" in res.error
    finally:
        ep.close()


def test_syntax_error_message(ep):
    res = ep.run("def f(:\n  pass")
    assert res.error and "SyntaxError" in res.error and res.killed_reason is None


@pytest.mark.parametrize(
    "code, needle",
    [
        ("x = 1\n" + "#" * 1_000_000, "max_code_chars"),
        ("print('a')\x00", "null byte"),
        ("caf\u00e9 = 1", "non-ASCII identifier"),
        ("\uff4f\uff50\uff45\uff4e('/etc/passwd')", "non-ASCII identifier"),
    ],
)
def test_bad_input_gets_clear_error(ep, code, needle):
    res = ep.run(code)
    assert res.error and needle in res.error
    assert ep.run("print('still here')").stdout == "still here\n"


def test_output_cap_marker():
    res = RunResult(stdout="x" * 5000)
    out = res.output(2000)
    assert out.startswith("x" * 2000) and "output truncated: 3000 more characters" in out
    assert RunResult(stdout="ok\n", error="E").output(2000) == "ok\nE"


def test_read_cap_truncates_in_the_worker(pool):
    ep = pool.new_episode("")
    try:
        res = ep.run("print('y' * 10_000_000)")
        assert res.truncated and len(res.stdout) == pool.cfg.read_cap_chars
    finally:
        ep.close()


def test_timeout_kills_and_next_call_reports_dead(pool):
    ep = pool.new_episode("")
    res = ep.run("while True:\n    pass")
    assert res.killed_reason == "timeout" and not ep.alive
    again = ep.run("print(1)")
    assert again.killed_reason == "dead" and "killed earlier (timeout)" in again.error
    ep.close()
    ep.close()
    fresh = pool.new_episode("abc")
    assert fresh.run("print(context)").stdout == "abc\n"
    fresh.close()


def test_closed_episode(pool):
    ep = pool.new_episode("")
    ep.close()
    assert ep.run("print(1)").killed_reason == "dead" and not ep.alive


def test_bad_context_type(pool):
    with pytest.raises(TypeError, match="context must be a str"):
        pool.new_episode(b"bytes")  # type: ignore[arg-type]


def test_required_layer_missing_fails_closed():
    with pytest.raises(SandboxError, match="bwrap"):
        SandboxPool(SandboxConfig(required_layers=["bwrap"], disabled_layers=["bwrap"]))


def test_unknown_layer_name_is_rejected():
    with pytest.raises(ValueError, match="unknown sandbox layer"):
        SandboxConfig(required_layers=["firewall"])
