"""User-supplied SFT demonstrations: laid out in tokens as the env server lays out an episode, checked against the
chat template's rendering of the whole conversation, refused with the line and the fix when they differ."""

from __future__ import annotations

import json

import pytest

from fathom.config.sft import SftConfig
from fathom.env_server.server import prompts
from fathom.env_server.server.demos import IGNORE, DemoError, rows_from_demonstrations
from fathom.env_server.server.tokens import ChatTokens
from tests.unit.env_server.fakes import byte_tokenizer

REPLIES = ["```repl\nprint(context.find('code'))\n```", "```repl\nFINAL(context[80:84])\n```"]


def demo(replies=REPLIES) -> dict:
    msgs = prompts.initial_messages("What is the code?", "x" * 80 + "4242 is the code", 40)
    msgs += [{"role": "assistant", "content": replies[0]}, {"role": "user", "content": "REPL output:\n```\n84\n```"},
             {"role": "assistant", "content": replies[1]}]
    return {"messages": msgs}


def write(tmp_path, *lines) -> str:
    p = tmp_path / "demos.jsonl"
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return str(p)


def test_rows_match_the_template_and_train_only_the_replies(tmp_path) -> None:
    chat = ChatTokens(byte_tokenizer(), "byte-test")
    (row,) = rows_from_demonstrations(write(tmp_path, demo()), chat, 4096)
    whole = chat.encode(chat.tok.apply_chat_template(demo()["messages"], tokenize=False))
    assert row["input_ids"] == whole[: len(row["input_ids"])]
    trained = chat.tok.decode([t for t, lab in zip(row["input_ids"], row["labels"]) if lab != IGNORE])
    assert trained == "<|im_end|>".join(REPLIES) + "<|im_end|>"
    assert row["labels"][-1] == chat.eot_id and row["labels"][0] == IGNORE


def test_a_template_that_rewrites_replies_is_refused_naming_the_line(tmp_path) -> None:
    tok = byte_tokenizer()
    template = tok.chat_template.replace("message.content", "message.content | trim")
    assert template != tok.chat_template
    tok.chat_template = template
    chat = ChatTokens(tok, "trimming")
    good, bad = demo(), demo([REPLIES[0] + "  \n", REPLIES[1]])
    path = write(tmp_path, good, bad)
    with pytest.raises(DemoError, match=r"demos.jsonl:2: .* differ from the chat template's rendering .* at token"):
        rows_from_demonstrations(path, chat, 4096)


def test_bad_lines_say_what_to_fix(tmp_path) -> None:
    chat = ChatTokens(byte_tokenizer(), "byte-test")
    cases = [("{not json", "demos.jsonl:1 is not valid JSON"),
             ({"messages": [{"role": "user", "content": "hi"}]}, "ends with an assistant reply"),
             ({"messages": demo()["messages"] + [{"role": "assistant", "content": "again"}]}, "must alternate"),
             ({"messages": [{"role": "robot", "content": "x"}]}, "message 0 must be")]
    for line, msg in cases:
        with pytest.raises(DemoError, match=msg):
            rows_from_demonstrations(write(tmp_path, line), chat, 4096)
    with pytest.raises(DemoError, match="over sft.max_length 10"):
        rows_from_demonstrations(write(tmp_path, demo()), chat, 10)
    with pytest.raises(DemoError, match="does not exist"):
        rows_from_demonstrations(str(tmp_path / "none.jsonl"), chat, 4096)
    with pytest.raises(ValueError, match="SFT would have no data"):
        SftConfig(teacher=False)
