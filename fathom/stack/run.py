"""The main job's steps run under one supervisor: servers kept up (restarted with what they forgot), a server
restarted with new arguments, and stages run to completion."""

from __future__ import annotations

import time
from typing import Any

from fathom.stack.cores import trainer_fence
from fathom.stack.plan import Step
from fathom.stack.recovery import hooks_for
from fathom.stack.supervisor import Restarts, Supervisor
from fathom.trainer.merged_dir import remove_tmpfs


def run_steps(cfg: Any, steps: list[Step], console: Any) -> dict[str, float]:
    """Run `steps` in order, reporting on the rich `console`; returns the seconds each server took to become
    healthy and each stage took to finish. Raises `LaunchError` when a child fails; every child is stopped on
    the way out, also on KeyboardInterrupt (and SIGTERM, which the supervisor turns into one). Then the run's tmpfs
    folder of merged weights (`policy_server.merged_dir = "auto"`) is removed."""
    try:
        return _run(cfg, steps, console)
    finally:
        # After every child is stopped, never before: until then vLLM may be restarted onto these weights.
        if (gone := remove_tmpfs(cfg.policy_server.merged_dir, cfg.run_dir, cfg.run_name)) is not None:
            console.print(f"removed the merged weights in {gone}")


def _run(cfg: Any, steps: list[Step], console: Any) -> dict[str, float]:
    log_dir = cfg.run_dir / "logs"
    lc = cfg.launch
    restarts = Restarts(limit=lc.max_restarts, window_s=lc.restart_window_s, backoff_s=lc.restart_backoff_s,
                        backoff_max_s=lc.restart_backoff_max_s, start_timeout_s=lc.server_start_timeout_s)
    hooks = hooks_for(cfg)
    step_s: dict[str, float] = {}
    with Supervisor(log_dir, restarts=restarts, on_event=lambda line: console.print(f"[yellow]{line}[/]")) as sup:
        for s in steps:
            t_step = time.monotonic()
            if s.kind == "server":
                with console.status(f"starting {s.name} (log: {log_dir / (s.name + '.log')})") as status:
                    sup.serve(s.name, s.argv, s.health_url, lc.server_start_timeout_s,
                              on_tick=status.update, on_restart=hooks.get(s.name))
                console.print(f"[green]{s.name} {'healthy' if s.health_url else 'started'}[/] "
                              f"({s.health_url or 'no health URL'})")
            elif s.kind == "restart":
                with console.status(f"restarting {s.name} for the evaluation on cores "
                                    f"{lc.eval_policy_cores}") as status:
                    sup.replace(s.name, s.argv, s.health_url, lc.server_start_timeout_s,
                                on_tick=status.update, on_restart=hooks.get(s.name))
                console.print(f"[green]{s.name} restarted on cores {lc.eval_policy_cores}[/] ({s.health_url})")
            else:
                console.rule(f"stage {s.name}")
                stall = {"heartbeat": cfg.run_dir / "metrics.jsonl",
                         "stall_s": cfg.trainer.watchdog_s + lc.stall_grace_s} if s.name == "grpo" else {}
                with trainer_fence(cfg, s.name, console):
                    sup.run_stage(s.name, s.argv, **stall)
            step_s[f"{s.name} restart" if s.kind == "restart" else s.name] = round(time.monotonic() - t_step, 1)
    return step_s
