"""Golden test of token-space prompts on the prepared models' real tokenizers and the Qwen2.5 template.

For a 3-turn conversation whose completions are canonical tokenizations, the token-space prompt of
turn 3 must equal, token for token, the chat template's rendering of the same messages. The suffix
the environment adds after a turn is pinned as exact text and ids.
"""

from __future__ import annotations

import pytest

from fathom.env_server.server import prompts
from fathom.env_server.server.tokens import PROBE, ChatTokens, TemplateError

IM_START, IM_END, NEWLINE = 1, 2, 198
SUFFIX_TEXT = "\n<|im_start|>user\nREPL output:\n```\n5\n```<|im_end|>\n<|im_start|>assistant\n"
# "\n" "<|im_start|>" "user" "\n" ... "<|im_end|>" "\n" "<|im_start|>" "assistant" "\n"
SUFFIX_IDS = [NEWLINE, IM_START, 4093, NEWLINE, 3256, 8677, 3124, 42, NEWLINE, 3725, NEWLINE, 37, NEWLINE, 3725,
              IM_END, NEWLINE, IM_START, 520, 9531, NEWLINE]
REPLIES = ["```repl\nprint(len(context))\n```", "Let me look.\n```repl\nimport re\nprint(re.findall(r'\\d+', context)[:3])\n```",
           "```repl\nFINAL('7781')\n```"]


def _conversation(chat: ChatTokens) -> tuple[list[int], list[dict[str, str]]]:
    """Three turns built the harness's way; returns turn 3's prompt ids and the same conversation as messages."""
    messages = prompts.initial_messages("What is the secret code?", "The secret code is 7781. " * 40, 300)
    ids = chat.initial(messages)
    feedback = [prompts.repl_feedback(["1000"], 6), prompts.repl_feedback(["['7781', '7781', '7781']"], 5)]
    for reply, user in zip(REPLIES, feedback):
        sampled = chat.encode(reply) + [chat.eot_id]  # a canonical sample: what the template would tokenize
        ids = chat.next_prompt(ids, sampled, user)
        messages = messages + [{"role": "assistant", "content": reply}, {"role": "user", "content": user}]
    return ids, messages


def _check(model_dir) -> None:
    chat = ChatTokens.load(model_dir)
    assert (chat.eot_text, chat.eot_id) == ("<|im_end|>", IM_END)
    suffix = chat.user_suffix("REPL output:\n```\n5\n```")
    assert chat.tok.decode(suffix) == SUFFIX_TEXT
    assert suffix == SUFFIX_IDS
    ids, messages = _conversation(chat)
    rendered = chat.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert ids == chat.tok.encode(rendered, add_special_tokens=False)
    assert chat.tok.decode(ids) == rendered
    # A completion cut by the length limit is closed with the end-of-turn token the template puts there.
    cut = chat.encode(REPLIES[0])[:5]
    assert chat.next_prompt([9], cut, "x") == [9, *cut, IM_END, *chat.user_suffix("x")]
    chat.check_against(chat.initial(PROBE))
    with pytest.raises(TemplateError, match=chat.name):
        chat.check_against(chat.initial(PROBE)[:-1])


def test_tiny_tokenizer_token_prompts_equal_the_template_rendering(tiny_model_dir):
    _check(tiny_model_dir)


def test_embedded_tokenizer_token_prompts_equal_the_template_rendering():
    from fathom.policy_server.models import prepare_embedded

    _check(prepare_embedded())
