"""Validation on arrival: each captured call is checked against OpenEnv's TrainingTurn contract.

The check runs while we still know which call it was. A turn that fails is kept (with what was
captured) and marked invalid, and its session is flagged, so a broken capture can stop the run
with a message that names the turn instead of silently training on nothing.

`contract_violation` applies the rules of `openenv.core.harness.training.TrainingTurn` (strict
types, then `capture.validate.validate_training_turn`) with C-level builtins: OpenEnv's own
validator walks every id in Python generators (~150 us per 600-token turn), which alone would be
a sixth of the proxy's added-latency budget. A parity test holds the two to the same verdicts,
and the trace endpoint still validates every turn it serves with OpenEnv's own models.
"""

from __future__ import annotations

import math
from typing import Any

from openenv.core.harness.training import TrainingTurn

from fathom.capture_proxy.capture import Captured

_INT = {int}
_NUMBER = {int, float}


def _ids_problem(name: str, ids: Any) -> str | None:
    if not isinstance(ids, list):
        return f"{name} is missing or not a list"
    if ids and (not set(map(type, ids)) <= _INT or min(ids) < 0):
        return f"invalid_token_id: {name} must be non-negative integers"
    return None


def contract_violation(prompt: Any, completion: Any, logprobs: Any, mask: Any) -> str | None:
    """Why these fields would fail OpenEnv's TrainingTurn, or None when it would accept them."""
    problems = [p for p in (_ids_problem("prompt_token_ids", prompt), _ids_problem("token_ids", completion)) if p]
    if problems:
        return "; ".join(problems)
    if logprobs is None:
        if completion:
            return f"no_logprobs: {len(completion)} sampled tokens with no logprobs"
        return "no_logprobs: the response carries no logprobs"
    if not isinstance(logprobs, list):
        return "invalid_logprob: logprobs are not a list"
    if logprobs:
        if not set(map(type, logprobs)) <= _NUMBER or not all(map(math.isfinite, logprobs)):
            return "invalid_logprob: logprobs must be finite numbers"
        if max(logprobs) > 0:
            return "positive_logprob: logprobs must not be positive"
    if not prompt:
        return "no_prompt_ids: the engine returned no prompt_token_ids (is return_token_ids supported?)"
    if len(logprobs) != len(completion):
        return f"logprob_misalign: {len(logprobs)} logprobs vs {len(completion)} sampled ids"
    if not isinstance(mask, list) or len(mask) != len(prompt) + len(completion):
        return "length_mismatch: loss_mask must cover prompt plus completion"
    if mask and (not set(map(type, mask)) <= _INT or not set(mask) <= {0, 1}):
        return "invalid_loss_mask: loss_mask must contain only integer 0 or 1"
    if any(mask[: len(prompt)]):
        return "trainable_prompt: prompt tokens must remain context"
    return None


def build_turn(
    call_id: str,
    cap: Captured,
    *,
    trainable: bool,
    request: dict[str, Any],
    response: dict[str, Any],
    metadata: dict[str, Any],
) -> tuple[TrainingTurn | None, str | None]:
    """The turn, or None and the reason it is invalid.

    The mask is set here, where the tokens are recorded: prompt tokens are context (0), sampled
    tokens are trained on (1) only when the call's role is trainable.
    """
    prompt, completion = cap.prompt_ids, cap.completion_ids
    n_prompt = len(prompt) if isinstance(prompt, list) else 0
    n_completion = len(completion) if isinstance(completion, list) else 0
    mask = [0] * n_prompt + [1 if trainable else 0] * n_completion
    problem = contract_violation(prompt, completion, cap.logprobs, mask)
    if problem is not None:
        return None, problem
    # Checked above with the contract's rules; OpenEnv's model re-validates when the trace is served.
    turn = TrainingTurn.model_construct(
        node_id=call_id, prompt_token_ids=prompt, completion_token_ids=completion,
        per_token_logps=[float(x) for x in cap.logprobs], loss_mask=mask,
        request=request, response=response, metadata=metadata,
    )
    return turn, None
