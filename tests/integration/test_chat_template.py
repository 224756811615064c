"""Prepared models speak Qwen2.5's chat format: pinned rendered strings, single-token markers."""

from __future__ import annotations

import jinja2
import pytest
from transformers import AutoTokenizer

from fathom.policy_server.models import qwen25_chat_template

CONVERSATION = [
    {"role": "system", "content": "You are FATHOM."},
    {"role": "user", "content": "What is 2+3?"},
    {"role": "assistant", "content": "The answer is 5."},
    {"role": "user", "content": "And 4+4?"},
]
EXPECTED = (
    "<|im_start|>system\nYou are FATHOM.<|im_end|>\n"
    "<|im_start|>user\nWhat is 2+3?<|im_end|>\n"
    "<|im_start|>assistant\nThe answer is 5.<|im_end|>\n"
    "<|im_start|>user\nAnd 4+4?<|im_end|>\n"
    "<|im_start|>assistant\n"
)
EXPECTED_NO_SYSTEM = (
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
)


def _reference_render(messages, add_generation_prompt=True) -> str:
    """Render TRL's qwen2_5.jinja with plain jinja2, independent of the tokenizer."""
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **_: __import__("json").dumps(x)
    return env.from_string(qwen25_chat_template()).render(messages=messages, add_generation_prompt=add_generation_prompt)


def _check(model_dir) -> None:
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    rendered = tok.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=True)
    assert rendered == EXPECTED
    assert rendered == _reference_render(CONVERSATION)
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True) == EXPECTED_NO_SYSTEM
    for marker in ("<|im_start|>", "<|im_end|>"):
        assert len(tok.encode(marker, add_special_tokens=False)) == 1, marker
    assert tok.eos_token == "<|im_end|>"


def test_tiny_model_template_matches_qwen25(tiny_model_dir):
    _check(tiny_model_dir)


@pytest.mark.slow
def test_embedded_model_template_matches_qwen25():
    from fathom.policy_server.models import prepare_embedded

    _check(prepare_embedded())
