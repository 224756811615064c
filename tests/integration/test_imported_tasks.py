"""An imported split end to end: `fathom tasks import` in one process, served by a separately started env server
(the session's scripted stack: scripted upstream, real proxy and sandbox, started before the import), scored by
`fathom eval --split`, and refused once a stored file changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from tests.integration.env_server_stack import ROOT, fathom_here, run_episodes

# The `no_tools` policy answers FINAL(<first quoted word of the question>): rows 0 and 2 are right (through an
# alias, and through numeric tolerance), row 1 is wrong; row 3 is never loaded before its file is changed.
ROWS = [
    {"id": "a", "question": "Who wrote the notes, 'Lovelace' or someone else?",
     "context": "The notes were written by Ada Lovelace in 1843. " * 40, "answer": "Ada Lovelace",
     "aliases": ["Lovelace"]},
    {"id": "b", "question": "What is the total of the 'ledger' column?", "context": "ledger: 5, 12\n" * 60,
     "answer": 17},
    {"id": "c", "question": "How many moons, '2.0' or more?", "context": "Mars has two moons. " * 80, "answer": 2},
    {"id": "d", "question": "Which 'unused' row?", "context": "never loaded " * 50, "answer": "x"},
]


def _fathom(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fathom.entrypoints.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env=os.environ)


@pytest.fixture(scope="module")
def stack(scripted_stack, tmp_path_factory):
    """The session's scripted stack (conftest), already running, on the `no_tools` policy: its env server serves
    the task store that `fathom tasks import` writes here, in a process of its own."""
    tmp = tmp_path_factory.mktemp("imported")
    store_dir = scripted_stack.store_dir
    src = tmp / "mydocs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    cfg = tmp / "store.toml"
    cfg.write_text(f'[tasks]\nstore_dir = "{store_dir}"\n')
    r = _fathom("tasks", "import", str(src), "--name", "mydocs", "-c", str(cfg), "--no-progress")
    assert r.returncode == 0, r.stderr[-2000:]
    scripted_stack.set_policy("no_tools")
    try:
        yield scripted_stack
    finally:
        scripted_stack.set_policy("reference")


def test_a_separate_env_server_serves_imported_ids_from_the_store(stack):
    results = run_episodes(stack.env_url, [{"task_id": f"mydocs-{i}", "sampling": {"max_tokens": 256}} for i in range(3)])
    assert [r["status"] for r in results] == ["done"] * 3, [r.get("error") for r in results]
    assert [r["reward_components"]["correct"] for r in results] == [True, False, True]
    assert results[0]["answer"] == "Lovelace" and results[2]["answer"] == "2.0"


def test_fathom_eval_scores_the_imported_split(stack, tmp_path):
    """`fathom eval` through the CLI app in-process (test_eval_vllm runs it as its own process): the split is read
    from the store the config names, as in a separate process."""
    out = tmp_path / "eval"
    r = fathom_here("eval", "--config", str(stack.tmp / "stack.toml"), "--split", "mydocs", "--n", "3", "--out",
                    str(out), "--eval.concurrency", "2")
    assert r.exit_code == 0, r.output[-2000:]
    assert "base: pass@1 0.667" in r.stdout and "over 3 scorable" in r.stdout
    res = json.loads((out / "results.json").read_text())
    assert res["split"] == "mydocs" and res["task_ids"] == ["mydocs-0", "mydocs-1", "mydocs-2"]
    assert res["models"]["base"]["summary"]["by_family"]["mydocs"]["n"] == 3


def test_a_changed_stored_file_is_refused_naming_the_task_and_the_fix(stack):
    m = json.loads((stack.store_dir / "splits" / "mydocs.json").read_text())
    sha = m["tasks"][3]["context_sha256"]
    obj = stack.store_dir / "objects" / sha[:2] / sha
    obj.write_text(obj.read_text().upper())
    r = httpx.post(f"{stack.env_url}/episodes", json={"task_id": "mydocs-3"}, timeout=60)
    assert r.status_code == 409, r.text
    assert "mydocs-3" in r.text and "changed on disk" in r.text and "fathom tasks import mydocs --force" in r.text
