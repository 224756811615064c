"""The RLM scaffold's words: the system prompt, the first user message, REPL feedback, and reply parsing.

Only the question and the context's size and opening characters ever reach the model;
the context itself stays in the REPL. Tests pin the exact rendered messages.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from fathom.env_server.sandbox.toolbox import DESCRIPTION as TOOLBOX

SYSTEM_PROMPT = f"""\
You answer a question about a long text that you cannot read directly. The text is in a \
Python REPL as the string variable `context`.

Write Python in ```repl blocks. Every block runs in the same REPL and you see what it prints \
(long output is cut). In the REPL you have:
- `context`: the whole text, a str.
- `question`: the question you are asked, a str.
- `llm(prompt)`: asks a language model; returns its reply as a str. Use it to read a short \
passage whose wording code cannot parse: put that passage and the question in the prompt, and keep it small.
- `llm_batch(prompts)`: runs several llm() prompts at once; returns a list of str.
- `FINAL(answer)`: submits your final answer and ends the episode.
- `FINAL_VAR(name)`: submits the value of the REPL variable called `name`.
{TOOLBOX}
Imports: re, json, math, statistics, collections, itertools, string, functools, textwrap, \
difflib, heapq, bisect.

Search and slice `context` with code (its length, re.finditer, small windows around hits) \
instead of printing it. Call FINAL as soon as you know the answer.

Example:
```repl
import re
hits = [m.start() for m in re.finditer("invoice", context)]
print(len(context), hits[:5])
print(context[hits[0] - 200 : hits[0] + 200])
```"""

NO_CODE_MESSAGE = (
    "Your reply had no ```repl code block. Write Python in a ```repl block to look at `context`, "
    "or answer inside one with FINAL(answer)."
)

NESTED_QUESTION = (
    "`context` holds a request that was sent to you; its instructions are at the start. "
    "Do what it asks and answer with FINAL(answer)."
)

# ```repl is the scaffold's tag; small models often write ```python or a bare fence, so those run too.
_CODE_BLOCK = re.compile(r"```(?:repl|python|py)?[ \t]*\n(.*?)```", re.DOTALL)
_TEXT_FINAL = re.compile(r"^[ \t]*FINAL\((.*)\)[ \t]*$", re.MULTILINE | re.DOTALL)
_TEXT_FINAL_VAR = re.compile(r"^[ \t]*FINAL_VAR\(\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?\s*\)[ \t]*$", re.MULTILINE)


def preview(context: str, chars: int) -> str:
    """The context's first `chars` characters, marked when cut."""
    if len(context) <= chars:
        return context
    return context[:chars] + " [...]"


def initial_messages(question: str, context: str, preview_chars: int) -> list[dict[str, str]]:
    """System prompt plus the first user message: question, context size and preview, never the context."""
    user = (
        f"Question: {question}\n\n"
        f"`context` holds {len(context):,} characters. It begins:\n"
        f'"""\n{preview(context, preview_chars)}\n"""'
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def repl_feedback(outputs: list[str], turns_left: int) -> str:
    """The user message after a turn's code ran: each block's (already truncated) output."""
    parts = []
    for i, out in enumerate(outputs, 1):
        label = "REPL output" if len(outputs) == 1 else f"REPL output of block {i}"
        parts.append(f"{label}:\n```\n{out if out.strip() else '(no output)'}\n```")
    parts.append(f"Turns left: {turns_left}. Write more ```repl code, or answer with FINAL(answer).")
    return "\n\n".join(parts)


def code_blocks(text: str) -> list[str]:
    """Code of every fenced block in a model reply, in order (empty blocks dropped)."""
    return [m.group(1) for m in _CODE_BLOCK.finditer(text) if m.group(1).strip()]


@dataclass(frozen=True)
class TextFinal:
    """A FINAL written in the reply's text rather than in code."""

    answer: str | None = None
    var: str | None = None


def text_final(text: str) -> TextFinal | None:
    """FINAL(answer) / FINAL_VAR(name) on a line of its own outside code blocks, as the RLM scaffold allows."""
    outside = _CODE_BLOCK.sub("", text)
    m = _TEXT_FINAL_VAR.search(outside)
    if m:
        return TextFinal(var=m.group(1))
    m = _TEXT_FINAL.search(outside)
    if not m:
        return None
    raw = m.group(1).strip()
    try:  # FINAL("x") / FINAL(42): a literal means its value, not its quotes
        value = ast.literal_eval(raw)
        return TextFinal(answer=str(value))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return TextFinal(answer=raw)
