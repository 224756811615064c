"""The REPL's helper toolbox: a few small functions every episode starts with, beside `context` and `llm`.

They exist so that a program that searches a long text fits in one short reply: the embedded model's replies
are capped at a few hundred tokens, and a line-walking loop written out by hand costs a hundred of them.
The helpers are restricted Python, compiled with the sandbox's own policy and run under the same guards
as the model's code (they are not host functions), in a namespace of their own that holds only the
episode's original `context` and the proxied `re` module; so rebinding `context` or `re` in the REPL does
not change what they read, and the model may shadow a helper's name without breaking anything else.
The system prompt lists them with `DESCRIPTION`; `NAMES` are kept out of SHOW_VARS and FINAL_VAR.
"""

from __future__ import annotations

NAMES = ("grep", "line_at", "window", "chunks")

MAX_CHUNKS = 100_000
"""`chunks()` refuses to cut more pieces than this, so a tiny size cannot exhaust the worker's memory."""

SOURCE = '''
def text_or_context(text):
    if text is None:
        return context
    if not isinstance(text, str):
        raise TypeError("text must be a str (default: context)")
    return text


def position(pos):
    if not isinstance(pos, int) or isinstance(pos, bool):
        raise TypeError("pos and size must be int character counts")
    return pos


def grep(pattern, text=None):
    """The lines of `text` (default: context) in which the regular expression `pattern` matches, in order."""
    if not isinstance(pattern, str):
        raise TypeError("grep() takes a str regular expression as its pattern")
    text = text_or_context(text)
    rx = re.compile(pattern)
    out = []
    pos = 0
    while pos <= len(text):
        m = rx.search(text, pos)
        if m is None:
            break
        start = text.rfind("\\n", 0, m.start()) + 1
        end = text.find("\\n", m.start())
        if end < 0:
            end = len(text)
        out.append(text[start:end])
        pos = end + 1
    return out


def line_at(pos, text=None):
    """The whole line of `text` (default: context) that holds character offset `pos`."""
    text = text_or_context(text)
    pos = min(max(position(pos), 0), len(text))
    start = text.rfind("\\n", 0, pos) + 1
    end = text.find("\\n", pos)
    return text[start:] if end < 0 else text[start:end]


def window(pos, size=500, text=None):
    """`size` characters of `text` (default: context) on each side of character offset `pos`."""
    text = text_or_context(text)
    size = position(size)
    if size < 0:
        raise ValueError("window() size must be 0 or more, got " + str(size))
    pos = position(pos)
    return text[max(pos - size, 0):max(pos + size, 0)]


def chunks(size=4000, text=None):
    """`text` (default: context) cut into consecutive pieces of at most `size` characters."""
    text = text_or_context(text)
    size = position(size)
    if size < 1:
        raise ValueError("chunks() size must be 1 or more, got " + str(size))
    if len(text) > MAX_CHUNKS * size:
        raise ValueError("chunks(" + str(size) + ") would cut " + str(len(text)) + " characters into more than "
                         + str(MAX_CHUNKS) + " pieces; use a size of at least " + str(len(text) // MAX_CHUNKS + 1))
    return [text[i:i + size] for i in range(0, len(text), size)]
'''

DESCRIPTION = """\
Helpers (text defaults to `context`):
- `grep(pattern, text=None)`: the lines where the regular expression `pattern` matches, a list of str.
- `line_at(pos, text=None)`: the whole line around character offset `pos`.
- `window(pos, size=500, text=None)`: `size` characters on each side of `pos`.
- `chunks(size=4000, text=None)`: the text cut into pieces of at most `size` characters."""


def install(namespace: dict, env: dict, code, context: str, re_module) -> None:
    """Run the compiled `SOURCE` (`code`, compiled under the caller's restricted policy) in `env`, a fresh
    restricted globals dict of its own, and copy the helpers into `namespace`."""
    env.update(context=context, re=re_module, MAX_CHUNKS=MAX_CHUNKS)
    exec(code, env)  # noqa: S102 - the toolbox is restricted code, compiled under the sandbox policy
    for name in NAMES:
        namespace[name] = env[name]
