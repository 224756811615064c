"""Start the real pieces of an episode as subprocesses: scripted upstream (or vLLM), capture proxy, env server.

They run under the launcher's own `Supervisor` (fathom.stack.supervisor): each in its own process group, stopped
group-wide on exit, SIGTERM included.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import httpx

from fathom.stack.supervisor import Supervisor
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
FATHOM = str(ROOT / ".venv" / "bin" / "fathom")
START_TIMEOUT_S = 120.0


class Stack:
    """Scripted upstream (or a given one), capture proxy and env server, children of one `Supervisor` whose logs
    (`scripted.log`, `proxy.log`, `env.log`) are in `tmp`."""

    def __init__(self, tmp: Path, sup: Supervisor):
        self.tmp, self.sup = tmp, sup
        self.upstream_url = self.proxy_url = self.env_url = ""

    def start(self, *, upstream_url: str | None = None, policy: str = "reference", model: str = "fathom-base",
              env_overrides: dict[str, object] | None = None, proxy_up: bool = True, extra_toml: str = "") -> "Stack":
        env_overrides = dict(env_overrides or {})
        if upstream_url is None:
            port = free_port()
            self.upstream_url = f"http://127.0.0.1:{port}"
            args = [FATHOM, "env", "scripted", "--policy", policy, "--port", str(port), "--model", model]
            if env_overrides.get("prompt_format", "tokens") == "tokens":
                # The token path needs a real tokenizer: the tiny model's (the embedded model's tokenizer).
                from fathom.policy_server.tiny import build_tiny

                tok = str(build_tiny())
                args += ["--tokenizer", tok]
                env_overrides.setdefault("tokenizer", tok)
            self.sup.spawn("scripted", args, f"{self.upstream_url}/health", server=True)
        else:
            self.upstream_url = upstream_url
        pport, eport = free_port(), free_port()
        self.proxy_url, self.env_url = f"http://127.0.0.1:{pport}", f"http://127.0.0.1:{eport}"
        env_lines = "\n".join(f"{k} = {_toml(v)}" for k, v in (env_overrides or {}).items())
        self.config = self.tmp / "stack.toml"
        self.config.write_text(
            f'[policy_server]\nserved_model_name = "{model}"\n\n'
            f'[capture_proxy]\nport = {pport}\nupstream_url = "{self.upstream_url}"\n\n'
            f'[env_server]\nport = {eport}\nproxy_url = "{self.proxy_url}"\n{env_lines}\n'
            f'{extra_toml}'
        )
        if proxy_up:
            self.sup.spawn("proxy", [FATHOM, "proxy", "serve", "--config", str(self.config)],
                           f"{self.proxy_url}/healthz", server=True)
        self.sup.spawn("env", [FATHOM, "env", "serve", "--config", str(self.config), "--log-level", "warning"],
                       f"{self.env_url}/health", server=True)
        for child in list(self.sup.children):  # started side by side, as their imports take most of the start
            self.sup.wait_healthy(child, START_TIMEOUT_S)
        return self

    def add_env_server(self) -> str:
        """One more env server on the same proxy and settings (another port); returns its URL."""
        port = free_port()
        n = sum(1 for c in self.sup.children if c.name.startswith("env"))
        url = f"http://127.0.0.1:{port}"
        self.sup.serve(f"env{n + 1}", [FATHOM, "env", "serve", "--config", str(self.config), "--port", str(port),
                                       "--log-level", "warning"], f"{url}/health", START_TIMEOUT_S)
        return url

    def stop_env_server(self, url: str) -> None:
        """Stop an env server that `add_env_server` started (its whole process group)."""
        child = next(c for c in self.sup.children if c.name.startswith("env") and c.health_url == f"{url}/health")
        self.sup.stop(child.name)

    def pid(self, name: str) -> int:
        """The process id of server `name` (scripted, proxy, env, env2, ...)."""
        return self.sup.child(name).proc.pid

    def set_policy(self, policy: str) -> None:
        httpx.post(f"{self.upstream_url}/scripted/policy", json={"policy": policy}, timeout=10).raise_for_status()

    def set_delay(self, delay_s: float) -> None:
        """Hold each of the scripted upstream's completions `delay_s` seconds (0: answer at once)."""
        httpx.post(f"{self.upstream_url}/scripted/fault", json={"delay_s": delay_s}, timeout=10).raise_for_status()


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return str(v)


def supervisor(log_dir: Path) -> Supervisor:
    """The tests' supervisor: output unbuffered (a failure's log tail shows the last lines), quick health polls."""
    return Supervisor(log_dir, env=os.environ | {"PYTHONUNBUFFERED": "1"}, poll_s=0.2)


@contextmanager
def running_stack(tmp: Path, **kw: object) -> Iterator[Stack]:
    with supervisor(tmp) as sup:
        yield Stack(tmp, sup).start(**kw)  # type: ignore[arg-type]


def fathom_here(*args: str) -> Any:
    """`fathom ARGS` through the CLI app in this process (Typer's runner; the result has exit_code, stdout, stderr),
    for checks whose subject is what a command does, not its process. A command applies its config's task settings
    process-wide (`tasks.configure`: the store root, the haystack); they go back to the defaults afterwards, so the
    tests after it see what a fresh process would."""
    from typer.testing import CliRunner

    from fathom.config import load_config
    from fathom.entrypoints.cli import app
    from fathom.tasks import configure

    try:
        return CliRunner().invoke(app, list(args))
    finally:
        configure(load_config(None, []).tasks)


def run_episodes(env_url: str, bodies: list[dict], timeout_s: float = 600.0) -> list[dict]:
    """POST every episode at once, then collect each result (long-polling GET /episodes/{id})."""
    with httpx.Client(base_url=env_url, timeout=60) as c:
        ids = []
        for b in bodies:
            r = c.post("/episodes", json=b)
            assert r.status_code == 202, r.text
            ids.append(r.json()["episode_id"])
        deadline = time.monotonic() + timeout_s
        out = []
        for eid in ids:
            while True:
                r = c.get(f"/episodes/{eid}", params={"wait_s": 30}, timeout=60)
                r.raise_for_status()
                res = r.json()
                if res["status"] in ("done", "error") or time.monotonic() > deadline:
                    out.append(res)
                    break
        return out


def short_tasks(n: int, max_chars: int = 16_000) -> list[str]:
    """Test-split task ids with short contexts, repeated to `n` (the number of episodes, not of tasks)."""
    from fathom.tasks import get_task, load_split

    ids = [t for t in load_split("test") if get_task(t).metadata.length_chars <= max_chars][:16]
    return [ids[i % len(ids)] for i in range(n)]


def run_factory(proxy_url: str, env_urls: list[str], task_ids: list[str], concurrency: int) -> dict[str, Any]:
    """Every task as one rollout through the rollout worker's session factory; wall time, per-server counts and
    failures."""
    from fathom.rollout_worker.session import FathomSessionFactory

    factory = FathomSessionFactory(proxy_url=proxy_url, env_url=env_urls, max_tokens=256, max_turns=4,
                                   timeout_s=300.0)

    def one(i_task: tuple[int, str]) -> dict[str, Any]:
        i, task = i_task
        session = factory.create(task, seed=i, episode_id=f"spread-{len(env_urls)}-{i}-{time.time_ns():x}")
        try:
            status = session.wait_for_completion(300.0)
            trace = session.fetch_training_trace() if status == 0 else None
            verdict = session.verify([])
            return {"server": session.env_index, "status": session.result.status if session.result else "?",
                    "reward": verdict.env_reward, "turns": len(trace.turns) if trace else 0}
        finally:
            session.close()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, enumerate(task_ids)))
    wall = time.perf_counter() - t0
    counts = [sum(1 for r in results if r["server"] == k) for k in range(len(env_urls))]
    failed = [r for r in results if r["status"] != "done"]
    return {"episodes": len(results), "wall_s": round(wall, 2), "episodes_per_s": round(len(results) / wall, 3),
            "per_server": counts, "failed": len(failed), "solved": sum(1 for r in results if (r["reward"] or 0) > 0.5),
            "in_flight_left": list(factory.balancer.in_flight)}


if __name__ == "__main__":  # manual poking: python tests/integration/env_server_stack.py
    import tempfile

    with running_stack(Path(tempfile.mkdtemp())) as st:
        print(st.env_url, st.proxy_url, st.upstream_url, flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    sys.exit(0)
