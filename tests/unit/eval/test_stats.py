"""pass@1 intervals and the paired comparison."""

from __future__ import annotations

import math

from fathom.eval.stats import bootstrap_ci, paired, pass_at_1


def test_pass_at_1_interval_brackets_the_rate_and_narrows_with_n():
    small = pass_at_1([True, False] * 5, n=2000, seed=1)
    big = pass_at_1([True, False] * 200, n=2000, seed=1)
    assert small["pass@1"] == big["pass@1"] == 0.5 and small["n"] == 10 and small["correct"] == 5
    for p in (small, big):
        assert p["ci"][0] < 0.5 < p["ci"][1]
    assert (big["ci"][1] - big["ci"][0]) < (small["ci"][1] - small["ci"][0]) / 3


def test_empty_and_degenerate_inputs():
    assert pass_at_1([])["pass@1"] is None and pass_at_1([])["ci"] is None
    assert all(math.isnan(x) for x in bootstrap_ci([]))
    assert pass_at_1([True] * 7)["ci"] == [1.0, 1.0]


def test_same_seed_same_interval():
    xs = [True, False, True, True, False, False, True]
    assert pass_at_1(xs, seed=3) == pass_at_1(xs, seed=3)


def test_paired_counts_and_interval():
    base = {f"t{i}": i < 10 for i in range(20)}              # 10 right
    adapter = {f"t{i}": 5 <= i < 20 for i in range(20)}       # 15 right: loses t0-4, gains t10-19
    adapter["only-adapter-task"] = True                       # unscorable under base: excluded, not compared
    p = paired(base, adapter, seed=0)
    assert (p["n"], p["both"], p["only_base"], p["only_adapter"], p["neither"], p["excluded"]) == (20, 5, 5, 10, 0, 1)
    assert p["delta"] == 0.25 and p["ci"][0] <= 0.25 <= p["ci"][1]
    assert p["only_base_tasks"] == [f"t{i}" for i in range(5)]


def test_paired_interval_is_tighter_than_independent_when_models_agree():
    base = {f"t{i}": i % 2 == 0 for i in range(200)}
    adapter = dict(base, t1=True, t3=True)  # agrees on 198 tasks
    p = paired(base, adapter, seed=0)
    ind_a, ind_b = pass_at_1(list(adapter.values()), seed=0), pass_at_1(list(base.values()), seed=0)
    assert (p["ci"][1] - p["ci"][0]) < (ind_a["ci"][1] - ind_a["ci"][0]) / 3 < (ind_b["ci"][1] - ind_b["ci"][0])
