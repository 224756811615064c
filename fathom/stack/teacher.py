"""The SFT warm start's recordings: the scripted teacher and a capture proxy in front of it, served in this
process on free loopback ports, with episodes run on the env server the config names, so they use the same
sandbox, harness and token path as GRPO."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable


def record_teacher(cfg: Any, task_ids: list[str], model_dir: Path, workers: int,
                   on_done: Callable[[list[dict]], None] | None = None) -> tuple[list[dict], list[dict]]:
    """Record the teacher's episodes of `task_ids`, `workers` at once. Returns (training rows, one summary per
    episode in task order); a recording that failed is a summary with its error, and the rest still count.
    `on_done(summaries so far)` is called as each episode is collected."""
    from fathom.capture_proxy.app import create_app
    from fathom.env_server.scripted import create_scripted_app
    from fathom.rollout_worker.session import FathomSessionFactory
    from fathom.stack.inproc import serve_in_thread
    from fathom.trainer.sft_record import record_episode

    name = cfg.policy_server.served_model_name
    teacher = create_scripted_app("teach", name, cfg.model.max_model_len, tokenizer_dir=str(model_dir),
                                  fix_fraction=cfg.sft.fix_fraction)
    rows: list[dict] = []
    summaries: list[dict] = []
    with serve_in_thread(teacher) as teacher_url, \
            serve_in_thread(create_app(cfg.capture_proxy, upstream_url=teacher_url, base_model=name,
                                       weight_sync="merged")) as proxy_url:
        factory = FathomSessionFactory(proxy_url=proxy_url, env_url=cfg.env_url,
                                       max_tokens=cfg.trainer.max_completion_tokens, max_turns=cfg.env_server.max_turns)
        with ThreadPoolExecutor(workers) as pool:
            futures = [pool.submit(record_episode, factory, t, cfg.sft.max_length) for t in task_ids]
            for fut in futures:
                try:
                    got, summary = fut.result()
                except Exception as e:  # noqa: BLE001 - one failed recording is reported, the rest still count
                    got, summary = [], {"error": str(e)}
                rows += got
                summaries.append(summary)
                if on_done is not None:
                    on_done(summaries)
    return rows, summaries
