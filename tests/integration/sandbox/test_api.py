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


def test_preloaded_variables_sit_beside_context(pool):
    ep = pool.new_episode("abc", variables={"question": "Which 'amber-fox'?"})
    res = ep.run("import re\nprint(re.search('[a-z]+-[a-z]+', question).group(0), len(context))\nprint(SHOW_VARS())")
    assert res.error is None
    assert res.stdout.startswith("amber-fox 3\n") and "'question': 'str'" in res.stdout
    assert ep.run("FINAL_VAR('question')").final_answer == "Which 'amber-fox'?"


@pytest.mark.parametrize("variables, needle", [
    ({"FINAL": "x"}, "must be a plain identifier"), ({"_q": "x"}, "must be a plain identifier"),
    ({"a b": "x"}, "must be a plain identifier"), ({"q": 3}, "must be a str"), ({"q": "x" * 70_000}, "must be a str"),
])
def test_bad_preloaded_variable_is_a_clear_error(pool, variables, needle):
    with pytest.raises(ValueError, match=needle):
        pool.new_episode("", variables=variables)


def test_required_layer_missing_fails_closed():
    with pytest.raises(SandboxError, match="bwrap"):
        SandboxPool(SandboxConfig(required_layers=["bwrap"], disabled_layers=["bwrap"]))


def test_unknown_layer_name_is_rejected():
    with pytest.raises(ValueError, match="unknown sandbox layer"):
        SandboxConfig(required_layers=["firewall"])


def test_everyday_code_works(ep):
    code = """
import re, json, math, statistics, collections, itertools, string, functools, textwrap, difflib, heapq, bisect
import operator
class Counter2:
    def __init__(self):
        self.n = 0
    def add(self, k):
        self.n += k
c = Counter2()
c.add(3)
words = re.findall(r'[a-z]+', context.lower())
top = collections.Counter(words).most_common(2)
rows = sorted([{'w': w, 'n': n} for w, n in top], key=operator.itemgetter('n'))
print(c.n, top[0], json.dumps(rows[0]), '{0} {k}'.format('a', k='b'), math.isqrt(17))
print(operator.attrgetter('real')(5), textwrap.shorten(context, 20), heapq.nsmallest(1, [3, 1]))
d = {}
d['x'] = [1]
d['x'] += [2]
a, (b, e) = 1, (2, 3)
print(d, a + b + e, [x * 2 for x in range(3)], statistics.mean([1, 2, 3]))
"""
    res = ep.run(code)
    assert res.error is None, res.error
    lines = res.stdout.splitlines()
    assert lines[0] == "3 ('the', 10) {\"w\": \"the\", \"n\": 10} a b 4"
    assert lines[1].startswith("5 The quick [...] [1]") or lines[1].startswith("5 The quick")
    assert lines[2] == "{'x': [1, 2]} 6 [0, 2, 4] 2"


def test_augmented_assignment_on_items_and_attributes(ep):
    res = ep.run("counts = {}\nfor w in context.split():\n    counts[w] = counts.get(w, 0)\n    counts[w] += 1\n"
                 "class A:\n    pass\na = A()\na.n = 1\na.n *= 5\nprint(counts['fox.'], a.n)")
    assert res.error is None and res.stdout == "10 5\n"
    assert "cannot modify" in ep.run("import math\nmath.pi += 1").error
    assert "invalid attribute name" in ep.run("a._n += 1").error
    assert "cannot modify a tuple" in ep.run("t = (1,)\nt[0] += 1").error


def test_output_defaults_to_the_configured_cap(ep):
    res = ep.run("print('z' * 5000)")
    assert not res.truncated and len(res.stdout) == 5001
    out = res.output()
    assert out.startswith("z" * ep._pool.cfg.output_cap_chars) and "output truncated: 3000 more characters" in out


def test_context_with_lone_surrogate_round_trips(pool):
    ep = pool.new_episode("a\ud800b")
    try:
        res = ep.run("print(len(context), context[0], context[2])\nFINAL(context)")
        # Inside, the context is exactly what was sent; what comes back out is valid UTF-8.
        assert res.stdout == "3 a b\n" and res.final_answer == "a\ufffdb"
    finally:
        ep.close()


def test_every_text_the_sandbox_returns_is_valid_utf8(pool):
    seen: list[str] = []
    ep = pool.new_episode("", llm_handler=lambda ps: seen.extend(ps) or ["ok"] * len(ps))
    try:
        res = ep.run("print(chr(0xD800))\nllm('q' + chr(0xDC80))\nFINAL('a' + chr(0xD83D) + chr(0xDE00) + chr(0xD800))")
        err = ep.run("raise ValueError(chr(0xDBFF))")
    finally:
        ep.close()
    for text in (res.stdout, res.final_answer, err.error, res.output(), err.output(), *seen):
        text.encode("utf-8")  # raises on a lone surrogate
    assert res.stdout == "\ufffd\n" and seen == ["q\ufffd"]
    assert res.final_answer == "a\U0001F600\ufffd" and "\ufffd" in err.error
