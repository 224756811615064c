"""Settings of held-out evaluation and the per-checkpoint watcher (owned by the eval component)."""

from __future__ import annotations

from pydantic import Field

from fathom.config.base import FathomModel


class EvalConfig(FathomModel):
    split: str = "test"
    """Pinned task split to evaluate: `train`, `test`, `heldout`, or an imported split's name (`fathom tasks import`)."""

    n_tasks: int | None = Field(None, gt=0)
    """Evaluate only the split's first N tasks (families round-robin, so every family stays in), plus the tasks of
    families added after the split's first block in proportion (`tasks.splits.rounds`: heldout, 100 -> 100 + 20
    bios, so the first 100 stay comparable); None = all."""

    base_n_tasks: int | None = Field(None, gt=0)
    """`fathom eval stages` scores the `base` stage on only the first N of those tasks (None = all). The untrained
    model runs every episode to the turn limit, so it is the slowest stage by far; its paired delta is then over
    those N tasks."""

    base_cache: bool = True
    """`fathom eval stages` reuses the base stage's results from `$FATHOM_HOME/eval_cache/base/` when the model,
    tasks, episode code and settings are the same as when they were stored (`fathom.eval.base_cache`), and stores
    them after scoring. Off: the base model is scored every time and nothing is stored."""

    watch_tasks: int = Field(100, gt=0)
    """Fixed subset (the split's first N tasks, plus later families in proportion, as `n_tasks`) each checkpoint is
    scored on by `fathom eval watch`."""

    temperature: float = Field(0.0, ge=0.0)
    """Sampling temperature of eval sessions; 0 = greedy, so pass@1 is one deterministic attempt per task."""

    concurrency: int = Field(8, ge=1)
    """Episodes in flight at once (vLLM batches their calls)."""

    max_depth: int | None = Field(None, ge=0)
    """Recursion depth of eval episodes; None = env_server.demo_max_depth."""

    episode_timeout_s: float = Field(3600.0, gt=0)
    """How long the evaluator waits for one episode before counting it unscorable."""

    bootstrap: int = Field(2000, ge=100)
    """Bootstrap resamples for the pass@1 confidence intervals."""

    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    """Confidence level of the bootstrap intervals."""

    seed: int = 0
    """Seed of the bootstrap resampling, so a report is reproducible."""

    report_episodes: int = Field(200, ge=0)
    """Episodes embedded in the HTML report's recursion-tree viewer (all scorable outcomes and families kept)."""

    adapter_name_prefix: str = "fathom-eval-"
    """Name under which eval loads adapters into vLLM (`{prefix}{checkpoint}`); apart from the trainer's policy names."""

    watch_poll_s: float = Field(10.0, gt=0)
    """Seconds between looks at the checkpoints directory or Hub repo."""
