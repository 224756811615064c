"""Planted secrets (HF token, W&B key, the shared token) never reach logs, traces, episode results, the run
directory, the model card, or the environment of any sandbox process. One stack serves every check.

The stack runs for real (scripted upstream, capture proxy and env server as subprocesses) with the shared
token required, so the same run also proves every hop sends it: rollout factory -> proxy and env server,
env server -> proxy. It is its own stack, not the session's: the secrets must be in the environment the servers
start with.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx

from tests.integration.env_server_stack import run_factory, short_tasks
from fathom.config import load_config, write_resolved
from fathom.config.security import SHARED_TOKEN_ENV
from fathom.eval.export import export
from fathom.protocol import token_headers
from tests.integration.env_server_stack import running_stack
from tests.procs import descendants
from tests.unit.eval.test_watch import write_adapter

SECRETS = {"HF_TOKEN": "hf_PLANTEDhfTOKEN0123456789abcdef", "WANDB_API_KEY": "PLANTEDwandbKEY0123456789abcdef",
           SHARED_TOKEN_ENV: "PLANTEDsharedTOKEN0123456789"}


def _leaks(text: str) -> list[str]:
    return [name for name, value in SECRETS.items() if value in text]


def test_planted_secrets_reach_no_output(tmp_path, monkeypatch):
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    outputs: dict[str, str] = {}
    (tmp_path / "stack").mkdir()
    with running_stack(tmp_path / "stack") as stack:
        got = run_factory(stack.proxy_url, [stack.env_url], short_tasks(4), concurrency=2)
        assert got["failed"] == 0, got  # the token went everywhere it had to
        auth = token_headers(SECRETS[SHARED_TOKEN_ENV])
        assert httpx.post(f"{stack.proxy_url}/sessions", json={}).status_code == 401
        sandbox = descendants(stack.pid("env"))
        assert sandbox, "the env server runs its sandbox zygote as a child process"
        for pid in sandbox:
            try:
                outputs[f"sandbox process {pid} environment"] = Path(f"/proc/{pid}/environ").read_bytes().decode(
                    "utf-8", "replace")
            except OSError:
                pass
        # traces and call records of every session the run opened, and the metrics page
        metrics = httpx.get(f"{stack.proxy_url}/metrics", headers=auth).text
        outputs["proxy metrics"] = metrics
        sessions = httpx.get(f"{stack.proxy_url}/healthz").json()["sessions_stored"]
        assert sessions >= 4
        outputs.update(_episode_read_back(stack, auth))
    for log in (tmp_path / "stack").glob("*.log"):
        outputs[f"log {log.name}"] = log.read_text(errors="replace")
    # the run directory: resolved config (a configured token is masked) and the exported model card
    cfg = load_config(None, ["--output_dir", str(tmp_path / "runs"), "--shared_token", SECRETS[SHARED_TOKEN_ENV]])
    write_resolved(cfg)
    run = cfg.run_dir
    write_adapter(run / "checkpoints" / "checkpoint-1")
    export(run)
    for f in run.rglob("*"):
        if f.is_file() and f.suffix in (".json", ".md", ".jsonl", ".txt", ".toml", ""):
            outputs[f"run dir {f.relative_to(run)}"] = f.read_text(errors="replace")
    assert any(k.startswith("sandbox process") for k in outputs)
    leaks = {where: _leaks(text) for where, text in outputs.items() if _leaks(text)}
    assert not leaks, leaks
    assert os.environ["HF_TOKEN"] == SECRETS["HF_TOKEN"]  # planted for real, all along


def _episode_read_back(stack, auth: dict[str, str]) -> dict[str, str]:
    """One episode's result and its session's trace and call records, read back over HTTP."""
    with httpx.Client(headers=auth, timeout=60) as http:
        task = short_tasks(1)[0]
        sid = http.post(f"{stack.proxy_url}/sessions", json={"trainable": True}).json()["session_id"]
        r = http.post(f"{stack.env_url}/episodes", json={"task_id": task, "session_id": sid})
        assert r.status_code == 202, r.text
        res = http.get(f"{stack.env_url}/episodes/{r.json()['episode_id']}", params={"wait_s": 120}).json()
        assert res["status"] == "done", res
        return {"episode result": json.dumps(res), "trace": http.get(f"{stack.proxy_url}/sessions/{sid}/trace").text,
                "calls": http.get(f"{stack.proxy_url}/sessions/{sid}/calls").text}
