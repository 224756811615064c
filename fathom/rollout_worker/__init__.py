"""Rollouts for training: OpenEnv sessions over the capture proxy and env server, driven by TRL's
HarnessRolloutWorker (loop-owning mode). `build_worker` wires TRL's worker to our session factory."""

from fathom.rollout_worker.worker import build_worker

__all__ = ["build_worker"]
