"""Per-episode numbers and the summary: unscorable apart, buckets beyond the window, tokens by role."""

from __future__ import annotations

from fathom.eval.metrics import episode_row, repl_error, summarize
from tests.unit.eval.episodes import episode


def test_row_reads_the_recursion_tree():
    r = episode_row(episode("needle-64k-s1000003", "correct", tokens=500, deep=True, repl_error=True, no_code=True))
    assert (r["family"], r["length"], r["scorable"], r["correct"]) == ("needle", 65536, True, True)
    assert r["root_tokens"] == 400 + 20 and r["sub_tokens"] == 80 + 50
    assert r["subcalls_by_depth"] == {"1": 2}
    assert r["repl_errors"] == 1 and r["no_code_turns"] == 1 and r["truncated_turns"] == 1 and r["format_failure"]


def test_unscorable_is_not_wrong():
    rows = [episode_row(episode(f"needle-1k-s100000{i}", o)) for i, o in enumerate(["correct", "wrong", "unscorable"])]
    s = summarize(rows, max_model_len=4096)
    assert s["pass@1"]["pass@1"] == 0.5 and s["pass@1"]["n"] == 2
    assert s["unscorable"] == 1 and "proxy unreachable" in s["unscorable_episodes"][0]["error"]
    assert s["stop_reasons"] == {"error": 1, "final": 2}


def test_buckets_mark_contexts_beyond_the_window():
    ids = ["needle-1k-s1000000", "needle-1m-s1000001", "kv_chain-1m-s1000002", "kv_chain-32k-s1000003"]
    rows = [episode_row(episode(t, o)) for t, o in zip(ids, ["correct", "correct", "wrong", "wrong"])]
    s = summarize(rows, max_model_len=4096)
    by = {b["bucket"]: b for b in s["by_length"]}
    assert [b["bucket"] for b in s["by_length"]] == ["1k", "32k", "1m"]
    assert not by["1k"]["beyond_window"] and by["32k"]["beyond_window"] and by["1m"]["beyond_window"]
    assert by["1m"]["n"] == 2 and by["1m"]["pass@1"] == 0.5
    assert s["window"]["within"]["pass@1"] == 1.0 and s["window"]["beyond"]["pass@1"] == 1 / 3
    assert set(s["by_family"]) == {"needle", "kv_chain"} and s["by_family"]["kv_chain"]["pass@1"] == 0.0


def test_repl_error_detection():
    assert repl_error("Traceback (most recent call last):\n  line 2\nZeroDivisionError: division by zero")
    assert repl_error("code could not be compiled: SyntaxError: invalid syntax")
    assert repl_error("Line 1: SyntaxError: invalid syntax at statement: 'x ='")
    assert not repl_error("12345\nfound 3 records")
