"""Every reach FATHOM makes into TRL 1.15's private API, in one package.

FATHOM drives TRL's `AsyncGRPOTrainer` and its OpenEnv `HarnessRolloutWorker` (public) but also leans on names TRL
does not promise to keep. They all live here, behind named functions and hook methods, and each one is pinned by a
contract test (tests/unit/trl_compat/) that fails when a TRL upgrade changes it. No other fathom module imports a
`_name` from `trl` or assigns to a `trl` attribute (tests/unit/trl_compat/test_no_private_trl.py walks the ASTs).

- `rollout.py` (imported by the rollout worker, in TRL's spawned child): TRL's chaining of a `TrainingTrace` into
  training rows (`_turns_from_training_trace`, `_chain_to_sequences`); the loop-owning rollout loop
  (`_HarnessRolloutLoop`, overriding `_run_session` and `_score_group`, calling `_push_metrics`, releasing
  `_metrics_queue`); the worker's `_loop_cls` and `_process`.
- `trainer.py` (imported by the trainer): `_iter_vllm_named_params` (the names vLLM loads weights under);
  `weight_transfer._HAS_STATEFUL_TRAINER_ENGINE`; the trainer's `_sync_weight` and `_metrics`, and the
  `_get_output_dir` / `_save_checkpoint` it inherits from transformers; the rollout collator's packing order and
  its per-token batch keys (`TOKEN_KEYS`, cut for shared-prefix rows); and four patched globals:
  `get_peak_flops_per_device`, `create_model_from_path` (both in `async_grpo_trainer`),
  `trl.trainer.utils._ChunkedLogProbFunction`, and `async_rollout_worker.is_vllm_available`.

The package imports nothing else from fathom, so both the rollout worker and the trainer may import it.
"""

from __future__ import annotations

TRL_VERSION = "1.15.0"
"""The one TRL release whose internals this package is written against (pyproject.toml pins it)."""


class TrlVersionError(RuntimeError):
    """The installed TRL is not the version whose internals FATHOM patches and drives."""


def check_trl_version() -> None:
    """Raise TrlVersionError unless TRL_VERSION is installed."""
    import trl

    if trl.__version__ != TRL_VERSION:
        raise TrlVersionError(
            f"FATHOM's trainer drives TRL {TRL_VERSION}'s AsyncGRPOTrainer internals, but TRL {trl.__version__} is "
            f"installed; run `pip install trl=={TRL_VERSION}` (pyproject.toml pins it)")


__all__ = ["TRL_VERSION", "TrlVersionError", "check_trl_version"]
