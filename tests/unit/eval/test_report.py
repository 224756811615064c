"""Outputs of an evaluation: files, the offline report's data, and the episode sample it keeps."""

from __future__ import annotations

import json
import re

from fathom.eval.evaluate import build_results
from fathom.eval.report import pick_episodes, write_outputs
from fathom.eval.runner import EvalTarget
from fathom.protocol import EpisodeLimits, Sampling
from tests.unit.eval.episodes import episode

IDS = ["needle-1k-s1000000", "kv_chain-2k-s1000001", "aggregate-64k-s1000002", "pairs-1m-s1000003"]


def results_and_episodes():
    base = [episode(t, o, eid=f"b-{t}") for t, o in zip(IDS, ["correct", "wrong", "wrong", "unscorable"])]
    adapter = [episode(t, o, eid=f"a-{t}", deep=True) for t, o in zip(IDS, ["correct", "correct", "wrong", "correct"])]
    targets = [EvalTarget("http://e", "http://p", "fathom-base", "base"), EvalTarget("http://e", "http://p", "ad", "adapter")]
    eps = {"base": base, "adapter": adapter}
    res = build_results(eps, targets=targets, split="test", task_ids=IDS, sampling=Sampling(temperature=0.0),
                        limits=EpisodeLimits(max_depth=4), max_model_len=4096, bootstrap=200)
    return res, eps


def test_results_compare_only_tasks_scorable_under_both():
    res, _ = results_and_episodes()
    c = res["comparison"]
    assert (c["n"], c["both"], c["only_adapter"], c["only_base"], c["neither"], c["excluded"]) == (3, 1, 1, 0, 1, 1)
    assert res["models"]["base"]["summary"]["pass@1"]["pass@1"] == 1 / 3
    assert res["models"]["adapter"]["summary"]["subcalls_by_depth"]["1"]["total"] == 8


def test_write_outputs_makes_an_offline_report(tmp_path):
    res, eps = results_and_episodes()
    paths = write_outputs(res, eps, tmp_path)
    assert json.loads(paths["results"].read_text())["comparison"]["only_adapter"] == 1
    assert len(paths["episodes"].read_text().splitlines()) == 8
    assert paths["pareto"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = paths["report"].read_text()
    # Offline: nothing fetched from elsewhere.
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    # A prompt holding "</script>" must not end the data block.
    assert html.count("</script>") == 2 and "\\u003c/script>" in html
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', html, re.S).group(1))
    assert len(data["episodes"]) == 8 and data["pareto_png"] and set(data["models"]) == {"base", "adapter"}


def test_episode_sample_keeps_every_kind():
    res, eps = results_and_episodes()
    items = [{"label": label, "row": row, "episode": {}} for label, m in res["models"].items() for row in m["rows"]]
    picked = pick_episodes(items * 10, 8)
    kinds = {(i["label"], i["row"]["family"], i["row"]["correct"], i["row"]["scorable"]) for i in picked}
    assert len(picked) == 8 and len(kinds) == 8
