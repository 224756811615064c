"""User-supplied SFT demonstrations (JSONL of chat messages) as token rows built the way episodes are.

A demonstration's turns are laid out exactly as the env server's token path lays out an episode:
turn 0 is the template's rendering of the messages before the first assistant reply, each reply is
its text's tokens + the end-of-turn token, and each later user message is the template's suffix
(`ChatTokens.next_prompt`). The row is then checked against the template's rendering of the whole
conversation: a demonstration whose tokens differ (text that merges across a turn boundary, a template
that re-renders earlier turns) would teach tokens no episode ever shows, so it is refused, naming the
line and the first differing token.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fathom.env_server.server.tokens import ChatTokens

IGNORE = -100


class DemoError(ValueError):
    """A demonstrations file or line that cannot become a training row; the message names it and the fix."""


def _messages(d: Any, where: str) -> list[dict[str, str]]:
    msgs = d.get("messages") if isinstance(d, dict) else None
    if not isinstance(msgs, list) or not msgs:
        raise DemoError(f"{where}: expected an object with a non-empty \"messages\" list")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant") \
                or not isinstance(m.get("content"), str):
            raise DemoError(f"{where}: message {i} must be {{\"role\": system|user|assistant, \"content\": string}}")
    roles = [m["role"] for m in msgs]
    first = roles.index("assistant") if "assistant" in roles else -1
    if first < 1 or roles[-1] != "assistant":
        raise DemoError(f"{where}: a demonstration starts with system/user messages (the episode's prompt) and ends "
                        "with an assistant reply")
    for i in range(first, len(roles)):
        if roles[i] == "system" or (i > first and roles[i] == roles[i - 1]):
            raise DemoError(f"{where}: after the first assistant reply, assistant and user (REPL output) messages "
                            f"must alternate; message {i} is a second {roles[i]!r}")
    return msgs


def demo_row(chat: ChatTokens, msgs: list[dict[str, str]], where: str) -> dict[str, list[int]]:
    """`input_ids` and `labels` (-100 off the assistant replies) of one checked demonstration."""
    first = next(i for i, m in enumerate(msgs) if m["role"] == "assistant")
    prompt = chat.initial(msgs[:first])
    ids, labels = list(prompt), [IGNORE] * len(prompt)
    for i in range(first, len(msgs)):
        m = msgs[i]
        if m["role"] == "assistant":
            reply = [*chat.encode(m["content"]), chat.eot_id]
            ids += reply
            labels += reply
        else:
            suffix = chat.next_prompt(ids, [], m["content"])[len(ids) + 1:]  # ids already end with the eot
            ids += suffix
            labels += [IGNORE] * len(suffix)
    whole = chat.encode(chat.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False))
    n = min(len(ids), len(whole))
    at = next((j for j in range(n) if ids[j] != whole[j]), n)
    if at < len(ids):
        raise DemoError(f"{where}: its turns as the env server builds them differ from the chat template's rendering "
                        f"of the whole conversation at token {at} of {len(ids)} (token-in/token-out contract); "
                        "check that each reply's text ends where the template closes it (no trailing whitespace or "
                        "special tokens in the content) and that the messages are what the env server sends")
    return {"input_ids": ids, "labels": labels}


def rows_from_demonstrations(path: str | Path, chat: ChatTokens, max_length: int) -> list[dict[str, list[int]]]:
    """Every line of a demonstrations JSONL as a checked row; DemoError on the first bad line."""
    p = Path(path)
    if not p.is_file():
        raise DemoError(f"demonstrations file {str(p)!r} does not exist; fix sft.demonstrations")
    rows = []
    with p.open() as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{p}:{n}"
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise DemoError(f"{where} is not valid JSON ({e.msg}); each line is one {{\"messages\": [...]}}") from None
            row = demo_row(chat, _messages(d, where), where)
            if len(row["input_ids"]) > max_length:
                raise DemoError(f"{where}: {len(row['input_ids'])} tokens, over sft.max_length {max_length}; shorten "
                                "the demonstration (print less REPL output) or raise sft.max_length")
            rows.append(row)
    if not rows:
        raise DemoError(f"demonstrations file {str(p)!r} has no demonstrations")
    return rows
