"""trainer.attention: the Hub kernel where it loads, SDPA per packed sequence with a warning where it does not."""

from __future__ import annotations

import warnings

import pytest

from fathom.trainer import attention
from fathom.trainer.cpu_compat import SEGMENT_SDPA


def _fails():
    raise ValueError("An error occurred while trying to load from 'kernels-community/flash-attn3': no network")


def _loads():
    return None


def test_auto_falls_back_to_sdpa_with_a_warning_naming_the_cause():
    with pytest.warns(UserWarning, match="cannot load.*no network.*trainer.attention = 'sdpa'"):
        assert attention.choose("auto", cuda=True, load=_fails) == SEGMENT_SDPA


def test_auto_uses_the_kernel_where_it_loads():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert attention.choose("auto", cuda=True, load=_loads) == attention.FLASH_ATTN3


def test_flash_attn3_required_stops_with_the_fix():
    with pytest.raises(attention.AttentionError, match="trainer.attention = 'sdpa'"):
        attention.choose("flash_attn3", cuda=True, load=_fails)


@pytest.mark.parametrize("setting,cuda", [("sdpa", True), ("auto", False), ("flash_attn3", False)])
def test_sdpa_or_cpu_never_tries_the_hub(setting, cuda):
    def must_not_load():
        raise AssertionError("the Hub kernel was fetched")

    assert attention.choose(setting, cuda=cuda, load=must_not_load) == SEGMENT_SDPA
    from transformers import AttentionInterface

    assert SEGMENT_SDPA in AttentionInterface()


def test_install_swaps_trls_hard_coded_kernel_for_the_choice(monkeypatch):
    from trl.experimental.async_grpo import async_grpo_trainer as agt

    seen = {}
    monkeypatch.setattr(agt, "create_model_from_path", lambda model_id, architecture=None, **kw: seen.update(kw))
    attention.install("sdpa-choice")
    agt.create_model_from_path("m", attn_implementation="kernels-community/flash-attn3", dtype="bfloat16")
    assert seen == {"attn_implementation": "sdpa-choice", "dtype": "bfloat16"}
    attention.install("again")  # a second install replaces the choice instead of stacking wrappers
    agt.create_model_from_path("m", attn_implementation="kernels-community/flash-attn3")
    assert seen["attn_implementation"] == "again"


def test_the_probe_catches_a_kernel_that_loads_but_cannot_run_here():
    from types import SimpleNamespace

    import torch

    def no_code_for_this_gpu(q, k, v, causal):
        raise RuntimeError("FlashAttention only supports Hopper GPUs or newer")

    with pytest.raises(RuntimeError, match="Hopper"):
        attention.probe(SimpleNamespace(flash_attn_func=no_code_for_this_gpu), device="cpu")
    with pytest.raises(RuntimeError, match="non-finite"):
        attention.probe(SimpleNamespace(flash_attn_func=lambda q, k, v, causal: torch.full_like(q, float("nan"))),
                        device="cpu")
    seen = []
    attention.probe(SimpleNamespace(flash_attn_func=lambda q, k, v, causal: (seen.append(causal) or q, None)),
                    device="cpu")
    assert seen == [True]
    attention.probe(SimpleNamespace(), device="cpu")  # no plain entry point: nothing to run
