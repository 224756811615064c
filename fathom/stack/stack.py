"""Start the serving stack from one config: vLLM (policy server), capture proxy, env server.

Used by `fathom eval --start` and `fathom eval watch --start`, so a job can evaluate with one
command. The servers are the main job's (`plan.server_steps`), run by its supervisor: each
a `fathom ... serve` child in its own process group, stopped group-wide on exit.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

from fathom.config import FathomConfig
from fathom.stack.plan import server_steps
from fathom.stack.supervisor import LaunchError as StackError
from fathom.stack.supervisor import Supervisor

__all__ = ["Stack", "StackError", "started"]


class Stack:
    """`with Stack(cfg, config_path, overrides):` vLLM + proxy + env server; URLs as attributes."""

    def __init__(self, cfg: FathomConfig, config_path: str, overrides: list[str], *, start_policy: bool = True):
        self.cfg, self.config_path, self.overrides, self.start_policy = cfg, config_path, list(overrides), start_policy
        self.policy_url, self.proxy_url, self.env_url = cfg.policy_url, cfg.proxy_url, cfg.env_url
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


def started(cfg: FathomConfig, config_path: str, overrides: list[str], start: bool) -> ContextManager[Stack | None]:
    """A `Stack` when `start`, else nothing to start: the servers the config names are already running."""
    return Stack(cfg, config_path, overrides) if start else contextlib.nullcontext(None)
