"""fathom.rollout_worker."""
