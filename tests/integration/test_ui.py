"""`fathom ui` in a real browser (Debian's chromium driven by Playwright): the tree fills in while the episode runs.

The session's scripted upstream plays the model on the token path (it tokenizes with the tiny model's template) and
waits `DELAY_S` per completion, so the page has states to show between the first turn and the answer.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fathom import tasks
from tests.integration.env_server_stack import FATHOM, START_TIMEOUT_S, supervisor
from tests.integration.test_eval import BROWSER_ARGS, CHROMIUM
from tests.ports import free_port

DELAY_S = 0.4
TASK = "needle-16k-s1000000"


@pytest.fixture(scope="module")
def ui_url(tmp_path_factory, tiny_model_dir, scripted_stack):
    """`fathom ui` in front of the session's scripted upstream (conftest), which plays `recursive` at DELAY_S per
    completion for this module and is set back afterwards."""
    up, ui_port = scripted_stack.upstream_url, free_port()
    scripted_stack.set_policy("recursive")
    scripted_stack.set_delay(DELAY_S)
    try:
        with supervisor(tmp_path_factory.mktemp("ui")) as sup:
            sup.serve("ui", [FATHOM, "ui", "--base-url", up, "--port", str(ui_port), "--tokenizer", str(tiny_model_dir)],
                      f"http://127.0.0.1:{ui_port}/", START_TIMEOUT_S)
            yield f"http://127.0.0.1:{ui_port}/"
    finally:
        scripted_stack.set_delay(0.0)
        scripted_stack.set_policy("reference")


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed (make setup installs it)")
def test_the_tree_fills_in_live(ui_url, tmp_path):
    from playwright.sync_api import sync_playwright

    task = tasks.get_task(TASK)
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(ui_url)
            # The model list comes from the endpoint's /v1/models when the page loads.
            page.wait_for_function("document.querySelector('#model input')?.value === 'fathom-base'", timeout=30_000)
            page.click("#load-example")
            page.wait_for_function("document.querySelector('#question textarea').value.length > 0")
            assert page.input_value("#expected textarea") == task.gold.answer
            page.click("#run")
            # Live: the root's first turn (its code) shows while the episode still runs (no answer yet).
            page.wait_for_selector("#tree [data-kind=turn][data-depth='0']", timeout=30_000)
            assert page.locator("#result [data-kind=answer]").count() == 0
            assert "llm_batch" in page.inner_text("#tree")
            page.screenshot(path=str(tmp_path / "ui-running.png"), full_page=True)
            page.wait_for_selector("#result [data-kind=answer]", timeout=60_000)
            assert task.gold.answer in page.inner_text("#result [data-kind=answer]")
            assert "(correct)" in page.inner_text("#result [data-kind=reward]")
            assert "token path" in page.inner_text("#status")
            tree = page.locator("#tree")
            assert tree.locator("[data-kind=turn][data-depth='0']").count() == 2
            assert tree.locator("[data-kind=subcall][data-depth='1']").count() == 3  # llm_batch of 2, one deep llm()
            assert tree.locator("[data-kind=turn][data-depth='1']").count() == 1  # the deep llm()'s nested episode
            assert tree.locator("[data-kind=waiting], .pending").count() == 0
            page.screenshot(path=str(tmp_path / "ui-done.png"), full_page=True)
        finally:
            browser.close()
    assert not errors, errors
    assert (tmp_path / "ui-done.png").stat().st_size > 10_000
    shutil.copy(tmp_path / "ui-done.png", tmp_path / "ui.png")  # what docs/ui.png was taken from
