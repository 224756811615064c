"""`fathom eval` through the real env server, capture proxy and sandbox (scripted upstream), and its
HTML report in a real browser (Debian's chromium driven by Playwright)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fathom.eval.evaluate import build_results
from fathom.eval.report import write_outputs
from fathom.eval.runner import EvalError, EvalRunner, EvalTarget
from fathom.protocol import EpisodeLimits, Sampling
from tests.integration.env_server_stack import fathom_here
from tests.ports import free_port

# 16k+ contexts so the `recursive` policy's 9000-character llm() runs as a nested RLM episode (depth 1 tree).
TASKS = ["needle-16k-s1000010", "kv_chain-16k-s1000011", "aggregate-16k-s1000012", "pairs-1k-s1000013"]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def stack(scripted_stack):
    """The session's scripted stack (conftest); each test sets the upstream policy its episodes need."""
    yield scripted_stack
    scripted_stack.set_policy("reference")


@pytest.fixture(scope="module")
def report(stack, tmp_path_factory):
    """A paired report from real episodes: `base` plays no_tools (wrong), `adapter` recursive (correct, with sub-calls)."""
    # Reference programs of aggregate and pairs reach ~750 tokens of a real tokenizer (the token path).
    sampling, limits = Sampling(temperature=0.0, max_tokens=1024), EpisodeLimits(max_depth=2)
    targets = [EvalTarget(stack.env_url, stack.proxy_url, "fathom-base", "base"),
               EvalTarget(stack.env_url, stack.proxy_url, "fathom-base", "adapter")]
    episodes = {}
    for t, policy in zip(targets, ["no_tools", "recursive"]):
        stack.set_policy(policy)
        episodes[t.label] = EvalRunner(t, sampling=sampling, limits=limits, concurrency=4, timeout_s=300).run(TASKS)
    res = build_results(episodes, targets=targets, split="test", task_ids=TASKS, sampling=sampling, limits=limits,
                        max_model_len=2048, bootstrap=200)
    return res, write_outputs(res, episodes, tmp_path_factory.mktemp("eval-out"))


def test_eval_scores_real_episodes_with_trees(report):
    res, paths = report
    base, adapter = res["models"]["base"]["summary"], res["models"]["adapter"]["summary"]
    assert base["scorable"] == adapter["scorable"] == len(TASKS)
    assert base["pass@1"]["pass@1"] < 0.5 and adapter["pass@1"]["pass@1"] == 1.0
    assert adapter["subcalls_by_depth"]["1"]["total"] == 3 * len(TASKS)  # llm_batch of 2 + one deep llm() each
    assert adapter["tokens"]["mean_sub"] > 0 and base["tokens"]["mean_sub"] == 0
    c = res["comparison"]
    assert c["n"] == len(TASKS) and c["only_adapter"] >= len(TASKS) - 1 and c["only_base"] == 0
    assert {b["bucket"] for b in adapter["by_length"]} == {"1k", "16k"}
    assert [b["beyond_window"] for b in adapter["by_length"]] == [False, True]  # 16k chars ~ 4k tokens > 2048
    assert json.loads(paths["results"].read_text())["models"]["adapter"]["summary"]["stop_reasons"] == {"final": 4}


def test_cli_eval_writes_outputs(stack, tmp_path):
    """Through the CLI app in-process: `fathom eval` runs as its own process in test_eval_vllm, and one more would
    only add its imports."""
    stack.set_policy("reference")
    out = tmp_path / "out"
    r = fathom_here("eval", "--config", str(stack.tmp / "stack.toml"), "--tasks", ",".join(TASKS[:2]), "--out",
                    str(out), "--eval.concurrency", "2")
    assert r.exit_code == 0, r.output[-2000:]
    assert "base: pass@1 1.000" in r.stdout
    assert {p.name for p in out.iterdir()} >= {"results.json", "episodes.jsonl", "pareto.png", "report.html"}


def test_unreachable_proxy_is_a_clear_error_not_a_score(stack):
    dead = f"http://127.0.0.1:{free_port()}"
    runner = EvalRunner(EvalTarget(stack.env_url, dead, None), sampling=Sampling(), limits=EpisodeLimits())
    with pytest.raises(EvalError, match="capture proxy at .* is not answering"):
        runner.run(TASKS[:1])


def test_unserved_model_is_named(stack):
    runner = EvalRunner(EvalTarget(stack.env_url, stack.proxy_url, "fathom-eval-nope"), sampling=Sampling(temperature=0),
                        limits=EpisodeLimits())
    with pytest.raises(EvalError, match="'fathom-eval-nope'"):
        runner.run(TASKS[:1])


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed (make setup installs it)")
def test_report_in_a_real_browser(report, tmp_path):
    from playwright.sync_api import sync_playwright

    _, paths = report
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(paths["report"].as_uri())
            assert "base vs adapter" in page.inner_text("h1")
            assert page.inner_text("#f-count").startswith("8 of 8")
            assert page.locator("#summary table tr").count() == 3 and page.locator("img.chart").count() == 1
            # Expand one correct adapter episode, its root turn, then an llm() node and its nested episode.
            ep = page.locator("details.episode[data-model=adapter][data-outcome=correct]").first
            ep.locator("summary").first.click()
            turn = ep.locator("details.node.turn").first
            turn.locator("summary").first.click()
            page.wait_for_function("document.querySelectorAll('details.episode[open] pre.code').length > 0")
            sub = turn.locator("details.node.subcall").last
            sub.locator("summary").first.click()
            page.wait_for_function("document.querySelectorAll('details.subcall[open] details.node.turn').length > 0")
            assert "nested episode" in sub.locator("summary").first.inner_text()
            # Filter: wrong answers only -> only base episodes stay visible.
            page.select_option("#f-outcome", "wrong")
            visible = page.locator("details.episode:not([hidden])")
            assert visible.count() >= 3
            assert set(visible.evaluate_all("els => els.map(e => e.dataset.model)")) == {"base"}
            page.select_option("#f-family", "needle")
            assert page.locator("details.episode:not([hidden])").count() == 1
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
        finally:
            browser.close()
    assert errors == []
