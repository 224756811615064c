"""The arrival check gives the same verdict as OpenEnv's TrainingTurn on good and broken captures."""

from __future__ import annotations

import random

import pytest
from openenv.core.harness.training import TrainingTurn
from pydantic import ValidationError

from fathom.capture_proxy.capture import Captured
from fathom.capture_proxy.validation import build_turn, contract_violation

NAN, INF = float("nan"), float("inf")


def _openenv_accepts(prompt, completion, logprobs, mask) -> bool:
    try:
        TrainingTurn(node_id="n", prompt_token_ids=prompt, completion_token_ids=completion,
                     per_token_logps=logprobs, loss_mask=mask)
    except (ValidationError, ValueError, TypeError):
        return False
    return True


CASES = [
    ([1, 2, 3], [4, 5], [-0.1, -2.0], [0, 0, 0, 1, 1]),
    ([1, 2, 3], [4, 5], [-0.1, -2], [0, 0, 0, 1, 1]),  # an integer logprob is a number
    ([1, 2, 3], [], [], [0, 0, 0]),  # zero sampled tokens: a warning, not fatal
    ([1, 2, 3], [4, 5], [-0.1, -2.0], [0, 0, 0, 0, 0]),  # zero-masked context row
    ([], [4], [-1.0], [1]),  # no prompt ids
    ([1, -2], [4], [-1.0], [0, 0, 1]),  # negative id
    ([1, True], [4], [-1.0], [0, 0, 1]),  # bool is not an id
    ([1, 2.0], [4], [-1.0], [0, 0, 1]),  # float id
    ([1, 2], [4, 5], [-1.0], [0, 0, 1, 1]),  # misaligned logprobs
    ([1, 2], [4, 5], [-1.0, NAN], [0, 0, 1, 1]),
    ([1, 2], [4, 5], [-1.0, -INF], [0, 0, 1, 1]),
    ([1, 2], [4, 5], [-1.0, 0.5], [0, 0, 1, 1]),  # positive logprob
    ([1, 2], [4, 5], [-1.0, True], [0, 0, 1, 1]),
    ([1, 2], [4, 5], [-1.0, "x"], [0, 0, 1, 1]),
    ([1, 2], [4, 5], [-1.0, -1.0], [0, 0, 1]),  # short mask
    ([1, 2], [4, 5], [-1.0, -1.0], [1, 0, 1, 1]),  # trainable prompt token
    ([1, 2], [4, 5], [-1.0, -1.0], [0, 0, 2, 1]),
]


@pytest.mark.parametrize("case", CASES)
def test_same_verdict_as_openenv(case):
    assert (contract_violation(*case) is None) == _openenv_accepts(*case)


def test_same_verdict_on_random_corruptions():
    rng = random.Random(0)
    for _ in range(400):
        n_p, n_c = rng.randint(0, 6), rng.randint(0, 6)
        prompt = [rng.randint(0, 50) for _ in range(n_p)]
        completion = [rng.randint(0, 50) for _ in range(n_c)]
        logprobs = [-rng.random() for _ in range(n_c)]
        mask = [0] * n_p + [1] * n_c
        target = rng.choice(["prompt", "completion", "logprobs", "mask", None])
        seq = {"prompt": prompt, "completion": completion, "logprobs": logprobs, "mask": mask}.get(target)
        if seq is not None and seq:
            seq[rng.randrange(len(seq))] = rng.choice([-1, 1.5, NAN, INF, True, 7, 0.25, None])
        case = (prompt, completion, logprobs, mask)
        assert (contract_violation(*case) is None) == _openenv_accepts(*case), case


def test_build_turn_sets_mask_where_tokens_are_recorded():
    cap = Captured([1, 2], [3, 4, 5], [-0.5, -0.5, -0.5], "stop", 2, 3, "x")
    turn, err = build_turn("c", cap, trainable=True, request={}, response={}, metadata={})
    assert err is None and turn.loss_mask == [0, 0, 1, 1, 1]
    turn, _ = build_turn("c", cap, trainable=False, request={}, response={}, metadata={})
    assert turn.loss_mask == [0, 0, 0, 0, 0]
    TrainingTurn.model_validate(turn.model_dump())  # what the trace endpoint re-checks


def test_missing_ids_are_named():
    cap = Captured(None, [3], [-0.5], "stop", 0, 1, "x")
    turn, err = build_turn("c", cap, trainable=True, request={}, response={}, metadata={})
    assert turn is None and "prompt_token_ids" in err
