"""`fathom ask` over a plain-text file, against a served model (the scripted upstream plays one)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fathom import tasks
from tests.integration.env_server_stack import FATHOM, ROOT, START_TIMEOUT_S, fathom_here, supervisor
from tests.ports import free_port


@pytest.fixture(scope="module", params=["chat", "tokens"])
def upstream(request, tmp_path_factory):
    """The scripted model; with a tokenizer it also takes token-id prompts and answers /tokenize, like vLLM. The
    token path uses the session's scripted upstream (conftest), which has the tiny model's tokenizer; the chat path
    needs one without a tokenizer, started here."""
    if request.param == "tokens":
        stack = request.getfixturevalue("scripted_stack")
        stack.set_policy("recursive")
        try:
            yield stack.upstream_url
        finally:
            stack.set_policy("reference")
        return
    port = free_port()
    with supervisor(tmp_path_factory.mktemp("ask")) as sup:
        sup.serve("scripted", [FATHOM, "env", "scripted", "--policy", "recursive", "--port", str(port)],
                  f"http://127.0.0.1:{port}/health", START_TIMEOUT_S)
        yield f"http://127.0.0.1:{port}"


def ask(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fathom.entrypoints.cli", "ask", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env=os.environ)


def test_ask_answers_with_the_recursion_tree(upstream, tmp_path, tiny_model_dir, request):
    """The chat path runs `fathom ask` as its own process, as a user runs it; the token path runs the same command
    through the CLI app in-process, where its imports (the tokenizer's included) are already paid."""
    task = tasks.get_task("needle-64k-s1000003")
    doc = tmp_path / "doc.txt"
    doc.write_text(task.context)
    args = ("--document", str(doc), "--question", task.question, "--base-url", upstream,
            "--tokenizer", str(tiny_model_dir))
    tokens = request.node.callspec.params["upstream"] == "tokens"
    if tokens:
        here = fathom_here("ask", *args)
        code, out, err = here.exit_code, here.stdout, here.stderr
    else:
        r = ask(*args)
        code, out, err = r.returncode, r.stdout, r.stderr
    assert code == 0, err[-2000:]
    assert ("token path, tokenizer" in err) == tokens and ("chat path: the server has no /tokenize" in err) != tokens
    assert out.strip().splitlines()[-1] == task.gold.answer
    assert "llm() depth 1" in out and "FINAL" in out  # the tree: sub-calls under the root turn
    assert "65,536 characters" in err


def test_ask_names_a_bad_server_or_model(upstream, tmp_path):
    """In-process: each is refused before anything starts, so a subprocess would only add its imports."""
    from typer.testing import CliRunner

    from fathom.entrypoints.cli import app

    def ask_here(*args: str):
        return CliRunner().invoke(app, ["ask", *args])

    doc = tmp_path / "doc.txt"
    doc.write_text("hello")
    r = ask_here("--document", str(doc), "--question", "q", "--base-url", f"http://127.0.0.1:{free_port()}")
    assert r.exit_code != 0 and "no OpenAI-compatible model server" in r.stderr, r.output
    r = ask_here("--document", str(doc), "--question", "q", "--base-url", upstream, "--model", "nope")
    assert r.exit_code != 0 and "'nope' is not served" in r.stderr, r.output
    r = ask_here("--document", str(tmp_path / "missing.txt"), "--question", "q", "--base-url", upstream)
    assert r.exit_code != 0 and "is not a file" in r.stderr, r.output
