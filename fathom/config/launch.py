"""Settings of the main job, `fathom launch`: which stages run and how its servers start."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from fathom.config.base import FathomModel
from fathom.config.cpus import checked_cpu_spec

Stage = Literal["sft", "grpo", "eval"]


class LaunchConfig(FathomModel):
    stages: list[Stage] = ["sft", "grpo", "eval"]
    """Stages `fathom launch` runs, in order. SFT is skipped anyway when `trainer.init_adapter` names a warm start."""

    eval_base: bool = True
    """Score the base model in the final evaluation. Off for runs that only compare GRPO with its starting adapter
    (`bench/learning_seeds.py`): the untrained model is the slowest stage, and its score does not change."""
    bucket_dir: str = ""
    """A mounted bucket the run is copied to, as `<bucket_dir>/<run_name>/`: each checkpoint and metrics.jsonl when
    it is saved, the whole run (less the merged weights) when the job ends, also after a failure. The run itself
    stays in `output_dir` on local disk, where renames, appends and mtimes behave; the bucket gets complete files
    (fathom/trainer/bucket.py). Empty: no copy."""

    eval_watch: bool = False
    """Also run `fathom eval watch` on the run's checkpoints while GRPO trains."""

    eval_policy_cores: str = ""
    """CPU only: cores vLLM's model worker gets for the final evaluation (a list like `0-1`, or `auto`). Set and
    different from `policy_server.cpu_cores`, the launcher restarts the policy server on them before the
    evaluation (after GRPO, so no trainer shares the machine then), or starts it there when evaluation is the only
    stage. Empty: vLLM stays on `policy_server.cpu_cores` throughout."""

    fence_trainer_cores: bool = True
    """While GRPO runs, keep every server (vLLM's API process, the proxy, the env server and its sandboxes) off
    `trainer.cpu_cores`; each thread's own mask comes back for the evaluation. No effect without trainer.cpu_cores."""

    server_start_timeout_s: float = Field(600.0, gt=0)
    """How long each server (vLLM, proxy, env server) may take to become healthy."""

    max_restarts: int = Field(3, ge=0)
    """How often one server (vLLM, proxy, env server, eval watcher) may be restarted within `restart_window_s`;
    one more death ends the run with its log's last lines. 0: the first death ends the run."""

    restart_window_s: float = Field(3600.0, gt=0)
    """The window `max_restarts` counts in, so rare deaths over a multi-day run do not add up to a stop."""

    restart_backoff_s: float = Field(2.0, ge=0)
    """Delay before a dead server's first restart; it doubles with each restart in the window."""

    restart_backoff_max_s: float = Field(60.0, ge=0)
    """Upper bound of the restart delay."""

    stall_grace_s: float = Field(300.0, gt=0)
    """The supervisor stops GRPO when its metrics.jsonl is older than `trainer.watchdog_s` plus this: the
    trainer's own watchdog should have ended it by then, so the trainer is too stuck to notice."""

    @field_validator("eval_policy_cores", mode="before")
    @classmethod
    def _eval_policy_cores(cls, v: object) -> object:
        return checked_cpu_spec(v, ("", "auto", "nobind"))
