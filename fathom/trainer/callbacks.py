"""Trainer callbacks: metrics.jsonl, heartbeat watchdog, Hub push on save, rich progress."""

from __future__ import annotations

import _thread
import json
import logging
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

log = logging.getLogger(__name__)

WATCHDOG_EXIT = 3
"""Exit status of a run the watchdog stopped."""


class MetricsJsonl(TrainerCallback):
    """One JSON line per logged step: TRL's metrics plus the rollouts (reward components, turns, sub-calls,
    unscorable count) that finished since the previous line, read from the worker's rollouts.jsonl."""

    def __init__(self, run_dir: str | Path, rollouts_path: str | Path):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.rollouts_path = Path(rollouts_path)
        self.offset = self.rollouts_path.stat().st_size if self.rollouts_path.exists() else 0
        self.last: dict[str, Any] = {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        # imported here: the rollout worker package pulls in OpenEnv (gradio, ~5 s), which the watchdog never needs
        from fathom.rollout_worker.rewards import read_new, summarize

        records, self.offset = read_new(self.rollouts_path, self.offset)
        row: dict[str, Any] = {"step": state.global_step, "time": time.time()}
        for k, v in (logs or {}).items():
            if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)):
                row[k] = v
        row.update(summarize(records))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        self.last = row


class Watchdog(TrainerCallback):
    """No optimizer step for `timeout_s` fails the run loudly: the message goes to the log and stderr, the main
    thread gets KeyboardInterrupt (so TRL's finally stops the rollout child), and the entry point exits
    WATCHDOG_EXIT. If the main thread is stuck in C and never sees it, the process exits after `grace_s`."""

    def __init__(self, timeout_s: float, *, grace_s: float = 60.0, poll_s: float | None = None, on_trip=None):
        self.timeout_s, self.grace_s = timeout_s, grace_s
        self.poll_s = poll_s if poll_s is not None else min(5.0, timeout_s / 4)
        self.last_step_at = time.monotonic()
        self.step = 0
        self.tripped: str | None = None
        self.on_trip = on_trip
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self.last_step_at = time.monotonic()
            self._thread = threading.Thread(target=self._run, name="fathom-watchdog", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def on_train_begin(self, args, state, control, **kwargs):
        self.step = state.global_step
        self.start()

    def on_step_end(self, args, state, control, **kwargs):
        self.step = state.global_step
        self.last_step_at = time.monotonic()

    def on_train_end(self, args, state, control, **kwargs):
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            idle = time.monotonic() - self.last_step_at
            if idle > self.timeout_s:
                self.tripped = (f"watchdog: no optimizer step for {idle:.0f} s (trainer.watchdog_s = "
                                f"{self.timeout_s:g}) after step {self.step}; the rollouts, the env server or vLLM "
                                "stalled. Check the run directory's logs; raise trainer.watchdog_s if steps are "
                                "legitimately this slow")
                log.critical(self.tripped)
                print(self.tripped, file=sys.stderr, flush=True)
                (self.on_trip or _thread.interrupt_main)()
                if self._stop.wait(self.grace_s):
                    return
                print("watchdog: the trainer did not stop; exiting", file=sys.stderr, flush=True)
                os._exit(WATCHDOG_EXIT)


class HubPush(TrainerCallback):
    """transformers v5 has no PushToHubCallback: push the newest checkpoint's adapter in on_save."""

    def __init__(self, repo_id: str, run_dir: str | Path):
        self.repo_id, self.run_dir = repo_id, Path(run_dir)

    def on_save(self, args, state, control, **kwargs):
        from huggingface_hub import HfApi

        ckpt = self.run_dir / f"checkpoint-{state.global_step}"
        try:
            api = HfApi()
            api.create_repo(self.repo_id, exist_ok=True, private=True)
            api.upload_folder(repo_id=self.repo_id, folder_path=str(ckpt), path_in_repo=f"checkpoint-{state.global_step}",
                              allow_patterns=["adapter_*", "*.json"], commit_message=f"step {state.global_step}")
        except Exception as e:  # noqa: BLE001 - the checkpoint is safe on disk; a push failure must not kill training
            log.error("pushing %s to the Hub repo %s failed: %s", ckpt, self.repo_id, e)


class BucketCopy(TrainerCallback):
    """Each checkpoint and metrics.jsonl to the bucket in on_save, the whole run at the end (`trainer/bucket.py`)."""

    def __init__(self, bucket: str | Path, run_dir: str | Path):
        self.bucket, self.run_dir = Path(bucket), Path(run_dir)

    def on_save(self, args, state, control, **kwargs):
        from fathom.trainer.bucket import copy_tree

        name = f"checkpoint-{state.global_step}"
        try:
            copy_tree(self.run_dir / name, self.bucket / name)
            copy_tree(self.run_dir / "metrics.jsonl", self.bucket / "metrics.jsonl")
        except OSError as e:  # the checkpoint is safe on local disk; a bucket hiccup must not kill training
            log.error("copying %s to the bucket %s failed: %s; the next save tries again", name, self.bucket, e)

    def on_train_end(self, args, state, control, **kwargs):
        from fathom.trainer.bucket import copy_run

        copy_run(self.run_dir, self.bucket)


class RichProgress(TrainerCallback):
    """A rich progress bar: step, reward, ETA."""

    def __init__(self, max_steps: int, enabled: bool = True):
        self.max_steps, self.enabled = max_steps, enabled
        self.progress: Any = None
        self.task: Any = None
        self.printed = -1

    def on_train_begin(self, args, state, control, **kwargs):
        if not self.enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[info]}"), TimeRemainingColumn(), transient=False)
        self.task = self.progress.add_task("train", total=self.max_steps, completed=state.global_step, info="")
        self.progress.start()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.progress is not None and logs:
            reward = logs.get("reward")
            info = f"reward {reward:.3f}" if isinstance(reward, float) and not math.isnan(reward) else ""
            self.progress.update(self.task, completed=state.global_step, info=info)
            console = self.progress.console
            # Without a terminal (a log file, HF Jobs) rich draws the bar only when it stops: a line a step instead.
            if not console.is_terminal and state.global_step != self.printed:
                self.printed = state.global_step
                console.print(f"train step {state.global_step}/{self.max_steps} {info}".rstrip(), highlight=False)

    def on_step_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
