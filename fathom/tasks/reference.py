"""Reference solutions: from the question text alone, Python that computes the answer from `context`.

The source runs inside the sandboxed REPL, so it keeps to what that sandbox allows: only
whitelisted imports (re), no names starting with an underscore, no dunders, no open/eval,
no tuple unpacking or augmented assignment (RestrictedPython needs extra guards for those),
and only basic builtins (len, range, int, str, set, list, max, sum), plus the REPL toolbox's helpers
(`grep`, `line_at`; fathom/env_server/sandbox/toolbox.py). It ends in FINAL(...).
It powers a scripted model that sees only the chat prompt, so it is given only the question.
What the question names (a key, a function, a label) the program reads out of the REPL's
`question` with the pattern the teacher matched (a shorter one for keys), so it never copies
it by hand: a model that learns these programs need not copy a key out of a wording it never saw.
"""

from __future__ import annotations

import difflib
import re

from fathom.tasks.families import MODULES
from fathom.tasks.families.base import STALE_MARKERS
from fathom.tasks.families.records import LABELS, PHRASES, VOID

_LINE = '''
def is_stale(line):
    low = line.lower()
    for w in STALE:
        if w in low:
            return True
    return False


def key_pattern(key):
    return re.compile("(?<![A-Za-z-])" + re.escape(key) + "(?![A-Za-z-])")
'''

_NEEDLE = _LINE + '''
answer = None
for m in key_pattern(KEY).finditer(context):
    line = line_at(m.start())
    nums = re.findall(r"\\d+", line)
    if nums and not is_stale(line):
        answer = nums[len(nums) - 1]
        break
FINAL(answer)
'''

_CHAIN = _LINE + '''
keys = re.compile(r"[a-z]+-[a-z]+")
cur = KEY
answer = None
seen = set()
while answer is None and cur is not None and cur not in seen:
    seen.add(cur)
    nxt = None
    for m in key_pattern(cur).finditer(context):
        line = line_at(m.start())
        found = keys.findall(line)
        if is_stale(line) or not found or found[0] != cur:
            continue
        if len(found) > 1:
            nxt = found[1]
            break
        nums = re.findall(r"\\d+", line)
        if nums:
            answer = nums[len(nums) - 1]
            break
    cur = nxt
FINAL(answer)
'''

# Records whose review carries one of the label's phrases, void ones dropped; `grep` is the REPL toolbox's
# (fathom/env_server/sandbox/toolbox.py). Only the asked operation's lines are written out, so the program
# stays inside the output cap.
_ROWS = '''
label = re.search("positive|negative|neutral", question.lower()).group(0)
rows = [r for r in grep(PHRASES[label]) if not re.search(VOID, r)]
'''

_AGGREGATE = {
    "count": "FINAL(len(rows))\n",
    "sum": 'FINAL(sum([int(re.search("(?:t: |d |/ )(\\\\d+)", r).group(1)) for r in rows]))\n',
    "argmax": 'names = [re.search("[A-Z][a-z]+ [A-Z][a-z]+", r).group(0) for r in rows]\n'
              "FINAL(max(set(names), key=names.count))\n",
}

_PAIRS = '''
by = {}
for r in rows:
    t = re.search("T\\\\d{6}", r).group(0)
    by[t] = by.get(t, []) + [re.search("R\\\\d{6}", r).group(0)]
FINAL("; ".join([" & ".join(v) for v in by.values() if len(v) > 1]))
'''

_CONFIG = '''
head = "### FILE: " + PATH + "\\n"
start = context.find(head)
end = context.find("\\n### FILE: ", start + 1)
section = context[start:end] if end >= 0 else context[start:]
value = None
for m in re.finditer("(?m)^" + re.escape(SETTING) + r"[ \\t]*(\\+?=)[ \\t]*(-?\\d+)[ \\t]*$", section):
    if m.group(1) == "=":
        value = int(m.group(2))
    else:
        value = value + int(m.group(2))
FINAL(str(value))
'''

_WHERE = '''
m = re.search("(?m)^def " + re.escape(FUNC) + r"\\(", context)
head = context.rfind("### FILE: ", 0, m.start())
FINAL(context[head + 10:context.find("\\n", head)])
'''

_CALLS = '''
answer = None
for m in re.finditer(r"(?<![\\w.])" + re.escape(FUNC) + r"\\(", context):
    start = context.rfind("\\n", 0, m.start()) + 1
    before = context[start:m.start()]
    if "#" in before or before.count('"') % 2 == 1 or before.strip() == "def":
        continue
    d = context.rfind("\\ndef ", 0, m.start())
    answer = re.match(r"\\ndef (\\w+)\\(", context[d:d + 200]).group(1)
    break
FINAL(answer)
'''

# The person's passages (grep) and the question go to one sub-call: their wording varies too much for a short
# program to read the city out of them, and a model can.
_BIOS = '''
FINAL(llm("\\n".join(grep(PERSON)) + "\\n\\n" + question).strip())
'''

_KEY = re.compile(r"(?<![A-Za-z-])[a-z]+-[a-z]+(?![A-Za-z-])")
# No generated question has another lowercase hyphenated word before its key (tests run every wording), so programs
# read the key with this shorter pattern: 20 tokens for the line against 45, which keeps the longest programs well
# inside the 400-token output cap of configs/smoke.toml (tests/integration/test_sft_data.py checks every family).
_KEY_SHORT = re.compile(r"[a-z]+-[a-z]+")
_PERSON = re.compile(r"[A-Z][a-z]+ [A-Z][a-z]+")
_LABEL = re.compile(r"\b(positive|negative|neutral)\b")
_CONST = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
_FUNC = re.compile(r"\b[a-z]+_[a-z]+_[a-z]+\b")
_PATH = re.compile(r"[\w./-]+\.py\b")


class _Ask:
    """A value the program reads out of the REPL's `question` when it runs: the first match of `pattern`."""

    def __init__(self, pattern: re.Pattern[str], lower: bool = False) -> None:
        self.pattern, self.lower = pattern, lower

    def __repr__(self) -> str:
        text = "question.lower()" if self.lower else "question"
        return f"re.search({self.pattern.pattern!r}, {text}).group(0)"


def _program(task: str, params: dict[str, object], body: str) -> str:
    head = f"# {task}\nimport re\n" + "".join(f"{k} = {v!r}\n" for k, v in params.items())
    return head + body


def _ask(pattern: re.Pattern[str], what: str, question: str, lower: bool = False,
         read: re.Pattern[str] | None = None) -> _Ask:
    """Check that `question` names `what` (a clear error if not); the program reads it from `question` with `read`
    (default: the same pattern)."""
    if pattern.search(question.lower() if lower else question) is None:
        raise ValueError(f"question {question[:120]!r} has no {what}; reference solutions cover generated tasks only")
    return _Ask(read or pattern, lower)


def _records_params(labels: tuple[str, ...]) -> dict[str, object]:
    """Each label's phrases (every split's) as one regular expression, and the void tags as another."""
    phrases = {lab: "|".join(p for split in PHRASES.values() for p in split[lab]) for lab in labels}
    return {"PHRASES": phrases, "VOID": "|".join(re.escape(v.strip()) for v in VOID.values())}


# Each kind of program opens with its own task line, a comment naming the kind of task. Related families' programs
# share their opening (needle and kv_chain their constants and two helper functions, aggregate and pairs the record
# filter), so without it the one choice that depends on the question's wording would fall a hundred tokens into the
# reply, far from the question; with it the model makes that choice at its first token (docs/toolbox.md).
TASK_LINES = {
    "needle": "The magic number stated for the key.",
    "kv_chain": "Follow the links from the start key to a value.",
    "pairs": "Pairs of labelled reviews that share a ticket.",
    "count": "Count the labelled reviews.",
    "sum": "Sum the amounts of the labelled reviews.",
    "argmax": "The customer with the most labelled reviews.",
    "config": "The final value of a setting in one file.",
    "where": "The file that defines the function.",
    "calls": "The function that calls the function.",
    "bios": "Ask llm() where the person lives.",
}
_FAMILY_OF_KIND = {"count": "aggregate", "sum": "aggregate", "argmax": "aggregate", "config": "code_qa",
                   "where": "code_qa", "calls": "code_qa"}
_BODIES = {"needle": _NEEDLE, "kv_chain": _CHAIN, "pairs": _ROWS + _PAIRS, "config": _CONFIG, "where": _WHERE,
           "calls": _CALLS, "bios": _BIOS, **{op: _ROWS + body for op, body in _AGGREGATE.items()}}
# What `program_family` sets aside before comparing: comment lines (the task line a model words its own way), the
# import, and the constants a program opens with (the key's pattern, phrase banks), which differ from task to task.
_PREAMBLE = re.compile(r"^(#.*|import re|[A-Z][A-Z0-9_]* = .*)$")
MIN_SIMILARITY = 0.6
"""How close (difflib's ratio) a program's body must come to a reference body to count as that kind of program."""


def program_body(code: str) -> str:
    """`code` without its preamble (comments, the import, the opening constants), as `program_family` compares it."""
    return "\n".join(ln for ln in code.strip().splitlines() if not _PREAMBLE.match(ln.strip())).strip()


def program_family(code: str) -> str | None:
    """Which family's reference program `code` is: the family of the reference body it is most similar to, when at
    least MIN_SIMILARITY; else None (not a program of any family). A model words its task line its own way (often
    the question's words), so the body decides, not the line."""
    body = program_body(code)
    if not body:
        return None
    score, kind = max((difflib.SequenceMatcher(None, body, ref.strip(), autojunk=False).ratio(), kind)
                      for kind, ref in _BODIES.items())
    return _FAMILY_OF_KIND.get(kind, kind) if score >= MIN_SIMILARITY else None


def reference_solution(question: str) -> str:
    """Sandbox-safe Python source that reads `context` and calls FINAL with the answer to `question`."""
    q, low = question, question.lower()
    stale = {"STALE": list(STALE_MARKERS)}
    if "pair" in low:
        _ask(_LABEL, "label", q, lower=True)
        return _program(TASK_LINES["pairs"], _records_params(("positive", "negative")), _ROWS + _PAIRS)
    if "follow" in low:
        return _program(TASK_LINES["kv_chain"], {**stale, "KEY": _ask(_KEY, "start key", q, read=_KEY_SHORT)}, _CHAIN)
    if "magic number" in low:
        return _program(TASK_LINES["needle"], {**stale, "KEY": _ask(_KEY, "key", q, read=_KEY_SHORT)}, _NEEDLE)
    if "review" in low:
        _ask(_LABEL, "label", q, lower=True)
        op = "argmax" if re.search(r"\b(most|largest)\b", low) else "sum" if re.search(r"\b(amounts?|sum)\b", low) \
            else "count"
        return _program(TASK_LINES[op], _records_params(LABELS), _ROWS + _AGGREGATE[op])
    if "city" in low:
        return _program(TASK_LINES["bios"], {"PERSON": _ask(_PERSON, "person's name", q)}, _BIOS)
    if _CONST.search(q):
        return _program(TASK_LINES["config"], {"SETTING": _Ask(_CONST), "PATH": _ask(_PATH, "settings path", q)}, _CONFIG)
    name = _ask(_FUNC, "function name", q)
    if "defin" in low or "path of the file" in low:
        return _program(TASK_LINES["where"], {"FUNC": name}, _WHERE)
    if "call" in low or "invoke" in low:
        return _program(TASK_LINES["calls"], {"FUNC": name}, _CALLS)
    raise ValueError(f"question {q[:120]!r} matches no task family; reference solutions cover generated tasks only")


def subcall_answer(prompt: str) -> str | None:
    """What the teacher replies to a sub-call a reference program sends: the generator's own reading of the
    passages in `prompt` (a family's `read`), or None when no family's reference program sends such a prompt."""
    for module in MODULES.values():
        read = getattr(module, "read", None)
        answer = read(prompt) if read else None
        if answer is not None:
            return answer
    return None
