"""Validation on arrival: each captured call is checked against OpenEnv's TrainingTurn contract.

The check runs while we still know which call it was. A turn that fails is kept (with what was
captured) and marked invalid, and its session is flagged, so a broken capture can stop the run
with a message that names the turn instead of silently training on nothing.
"""

from __future__ import annotations

from typing import Any

from openenv.core.harness.training import TrainingTurn
from pydantic import ValidationError

from fathom.capture_proxy.capture import Captured


def build_turn(
    call_id: str,
    cap: Captured,
    *,
    trainable: bool,
    request: dict[str, Any],
    response: dict[str, Any],
    metadata: dict[str, Any],
) -> tuple[TrainingTurn | None, str | None]:
    """The validated turn, or None and the reason it is invalid.

    The mask is set here, where the tokens are recorded: prompt tokens are context (0), sampled
    tokens are trained on (1) only when the call's role is trainable.
    """
    prompt, completion = cap.prompt_ids, cap.completion_ids
    if not isinstance(prompt, list) or not isinstance(completion, list):
        missing = [n for n, v in (("prompt_token_ids", prompt), ("token_ids", completion)) if not isinstance(v, list)]
        return None, f"upstream response has no {' or '.join(missing)}; is the policy server vLLM with return_token_ids?"
    if cap.logprobs is None:
        return None, f"upstream response has no logprobs for {len(completion)} sampled tokens"
    if not isinstance(cap.logprobs, list):
        return None, "upstream logprobs are not a list"
    mask = [0] * len(prompt) + [1 if trainable else 0] * len(completion)
    try:
        turn = TrainingTurn(
            node_id=call_id,
            prompt_token_ids=prompt,
            completion_token_ids=completion,
            per_token_logps=cap.logprobs,
            loss_mask=mask,
            request=request,
            response=response,
            metadata=metadata,
        )
    except ValidationError as e:
        errs = e.errors(include_url=False)
        more = f"; and {len(errs) - 3} more" if len(errs) > 3 else ""
        return None, "; ".join(_short(err) for err in errs[:3]) + more
    return turn, None


def _short(err: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in err.get("loc", ()))
    msg = str(err.get("msg", "invalid"))
    return f"{loc}: {msg}" if loc else msg
