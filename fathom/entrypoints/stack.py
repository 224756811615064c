"""Start the serving stack from one config: vLLM (policy server), capture proxy, env server.

Used by `fathom eval --start` and `fathom eval watch --start`, so a job can evaluate with one
command. The servers are the main job's (`launch_cmd.server_steps`), run by its supervisor: each
a `fathom ... serve` child in its own process group, stopped group-wide on exit.
"""

from __future__ import annotations

from fathom.config import FathomConfig
from fathom.entrypoints.launch_cmd import server_steps, server_urls
from fathom.entrypoints.supervisor import LaunchError as StackError
from fathom.entrypoints.supervisor import Supervisor

__all__ = ["Stack", "StackError"]


class Stack:
    """`with Stack(cfg, config_path, overrides):` vLLM + proxy + env server; URLs as attributes."""

    def __init__(self, cfg: FathomConfig, config_path: str, overrides: list[str], *, start_policy: bool = True):
        self.cfg, self.config_path, self.overrides, self.start_policy = cfg, config_path, list(overrides), start_policy
        urls = server_urls(cfg)
        self.policy_url, self.proxy_url, self.env_url = urls["policy"], urls["proxy"], urls["env"]
        self.supervisor = Supervisor(cfg.run_dir / "logs")

    def __enter__(self) -> "Stack":
        self.supervisor.__enter__()
        try:
            for step in server_steps(self.cfg, self.config_path, self.overrides):
                if step.name != "policy" or self.start_policy:
                    self.supervisor.serve(step.name, step.argv, step.health_url or "",
                                          self.cfg.launch.server_start_timeout_s)
        except BaseException:
            self.supervisor.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.supervisor.__exit__(*exc)
