"""TRL's own HarnessRolloutWorker (imported, never copied), wired to our session factory and reward log."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from fathom.rollout_worker.rewards import RolloutLog, rollout_reward
from fathom.rollout_worker.session import FathomSessionFactory


def build_worker(*, model_name: str, dataset: Any, tokenizer: Any, eos_token_ids: list[int], proxy_url: str,
                 env_url: str | list[str], vllm_url: str, num_generations: int, max_inflight: int, max_tokens: int,
                 max_turns: int, temperature: float, episode_timeout_s: float, rollouts_path: str | Path,
                 metadata: dict[str, Any] | None = None, drop_flat_groups: bool = False,
                 balance_lengths: bool = False, cpu_cores: list[int] | None = None) -> Any:
    """A HarnessRolloutWorker whose child process runs whole episodes on the env server.

    Everything handed over is picklable (partials, plain classes, paths): the worker spawns its child.
    `drop_flat_groups` and `balance_lengths` are the group switches of `groups.py`; both off is TRL's behaviour.
    `cpu_cores`: the cores the child moves to (None: it stays on the trainer's).
    """
    from fathom.rollout_worker.groups import FathomRolloutWorker

    log = RolloutLog(rollouts_path)
    factory = functools.partial(FathomSessionFactory, proxy_url=proxy_url, env_url=env_url, max_tokens=max_tokens,
                                max_turns=max_turns, timeout_s=episode_timeout_s, metadata=metadata or {},
                                on_failure=log.failure)
    return FathomRolloutWorker(
        drop_flat_groups=drop_flat_groups,
        balance_lengths=balance_lengths,
        cpu_cores=cpu_cores,
        rollout_log=log,
        model_name=model_name,
        dataset=dataset,
        reward_funcs=[],
        processing_class=tokenizer,
        eos_token_ids=eos_token_ids,
        harness_session_factory=factory,
        rollout_reward_fn=rollout_reward,
        num_generations=num_generations,
        max_inflight_tasks=max_inflight,
        queue_maxsize=1024,
        vllm_server_url=vllm_url,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=1.0,
        top_k=0,
        min_p=None,
        repetition_penalty=1.0,
        max_tool_calling_iterations=max_turns,
    )
