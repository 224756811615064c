"""`code_qa`: questions over a synthetic multi-file repository hidden among real stdlib files.

Three kinds: which function calls X, what value setting Y ends up with after a settings file
runs (last assignment wins, `+=` accumulates), and which file defines Z. Distractors: mentions
of X in comments and strings, calls to a near-duplicate `X_legacy`, commented-out and
function-local assignments to Y, a near-duplicate `Y_OLD`, imports of Z and a method named Z.
"""

from __future__ import annotations

import random

from fathom.tasks import haystack, vocab
from fathom.tasks.families.base import Spec, assemble
from fathom.tasks.record import Gold, Task

FAMILY = "code_qa"
VERBS = ["load", "sync", "parse", "merge", "flush", "check", "build", "route"]
SUFFIXES = ["LIMIT", "TIMEOUT", "RETRIES", "WORKERS", "PORT", "DEPTH"]

TEMPLATES = {
    # Several wordings a kind in train, with the name at the start, middle or end, so that SFT and GRPO teach
    # choosing the program from what is asked rather than from one sentence.
    "train": {"calls": ["Which function calls {x}()?",
                        "{x}() is invoked inside one function of the repository. Name that function.",
                        "Find the caller of {x}(): which function's body calls it?",
                        "Which function in the code contains a call to {x}()?",
                        "Some function calls {x}(). What is its name?"],
              "config": ["What value does the setting {y} end up with after {path} runs?",
                         "After {path} has run, what is the value of {y}?",
                         "{y} is assigned in {path}. What value does it hold once the file has run?",
                         "Read {path} to the end: which value does {y} have then?",
                         "Which final value does {path} leave in {y}?"],
              "where": ["In which file is the function {z} defined?",
                        "{z} is defined in one file of the repository. Which file?",
                        "Which file holds the definition of the function {z}?",
                        "Where is {z}() defined? Answer with the file's path.",
                        "Tell me the file that defines {z}."],
              "call_style": ["    result = {callee}({arg})\n    return result"]},
    "test": {"calls": ["Name the function whose body invokes {x}()."],
             "config": ["Once {path} has executed, what is the final value of {y}?"],
             "where": ["Which file contains the definition of {z}()?"],
             "call_style": ["    return {callee}({arg}) + 1"]},
    "heldout": {"calls": ["{x}() is called from exactly one function. Which one?"],
                "config": ["Trace the assignments in {path}: which value does {y} finally hold?"],
                "where": ["Give the path of the file that defines {z}."],
                "call_style": ["    out = []\n    out.append({callee}({arg}))\n    return out"]},
}


def _func(name: str, arg: str, body: str) -> str:
    return f"def {name}({arg}):\n{body}\n"


def _plain(rng: random.Random, arg: str) -> str:
    return f"    return {arg} * {rng.randrange(2, 9)}"


def _repo(spec: Spec, kind: str, ask: str, n_funcs: int) -> tuple[dict[str, list[str]], str, Gold, list[str]]:
    rng, split = spec.facts, spec.split
    style = TEMPLATES[split]["call_style"][0]
    adj, noun = vocab.part(vocab.ADJECTIVES, split), vocab.part(vocab.NOUNS, split)
    names = rng.sample([f"{a}_{n}_{v}" for a in adj for n in noun for v in VERBS], n_funcs + 2)
    dirs = rng.sample(noun, 2)
    paths = [f"{dirs[i % 2]}/{m}.py" for i, m in enumerate(rng.sample(noun, max(2, min(12, n_funcs // 3))))]
    files: dict[str, list[str]] = {p: [] for p in paths}
    arg = rng.choice(["value", "item", "data"])
    x, caller, rest = names[0], names[1], names[2:n_funcs]
    funcs = {n: _plain(rng, arg) if rng.random() < 0.5 or len(rest) < 2 else
             style.format(callee=rng.choice([r for r in rest if r != n]), arg=arg) for n in rest}
    funcs[x] = _plain(rng, arg)
    d = spec.distractors
    if kind == "calls":
        funcs[caller] = style.format(callee=x, arg=arg)
        if d and rest:
            funcs[rest[0]] = f"    # {x} is handled elsewhere\n" + funcs[rest[0]]
            funcs[f"{x}_legacy"] = _plain(rng, arg)
        if d and len(rest) > 1:
            funcs[rest[1]] = f'    label = "{x} skipped"\n' + style.format(callee=f"{x}_legacy", arg=arg)
        gold = Gold(answer=caller, type="string")
        q = ask.format(x=x)
    else:
        funcs[caller] = _plain(rng, arg)
    order = list(funcs)
    rng.shuffle(order)
    for i, n in enumerate(order):
        files[paths[i % len(paths)]].append(_func(n, arg, funcs[n]))
    if kind == "where":
        home = next(p for p in paths if any(f.startswith(f"def {x}(") for f in files[p]))
        other = next(p for p in paths if p != home)
        if d:
            mod = home[:-3].replace("/", ".")
            files[other].insert(0, f"from {mod} import {x}\n")
            files[other].append(_func(f"{x}_legacy", arg, _plain(rng, arg)))
            if spec.difficulty == 2:
                files[other].append(f"class {x.title().replace('_', '')}Helper:\n    def {x}(self):\n        return None\n")
        gold = Gold(answer=home, aliases=["./" + home], type="string")
        q = ask.format(z=x)
    if kind == "config":
        setting = f"{rng.choice(adj).upper()}_{rng.choice(noun).upper()}_{rng.choice(SUFFIXES)}"
        path = f"{dirs[0]}/settings.py"
        lines, val = [f'"""Settings of the {dirs[0]} package."""'], 0
        for j in range(1 + spec.difficulty + rng.randrange(2)):
            v = rng.choice([x for x in range(1, 100) if x != val])  # every statement changes the value
            if j and rng.random() < 0.5:
                lines.append(f"{setting} += {v}")
                val += v
            else:
                lines.append(f"{setting} = {v}")
                val = v
            lines.append(f"OTHER_{rng.choice(SUFFIXES)} = {rng.randrange(1, 100)}")
        if d:
            lines.insert(rng.randrange(1, len(lines) + 1), f"# {setting} = {rng.randrange(100, 999)}")
            lines.append(f"{setting}_OLD = {rng.randrange(100, 999)}")
            lines.append(f"\n\ndef reset_defaults():\n    {setting} = 0\n    return {setting}")
        files[path] = ["\n".join(lines) + "\n"]
        gold = Gold(answer=str(val), type="number")
        q = ask.format(y=setting, path=path)
    blocks = [f"{haystack.FILE_HEADER}{p}\n" + "\n\n".join(body) for p, body in files.items()]
    return files, q, gold, blocks


def generate(spec: Spec) -> Task:
    kind = spec.facts.choice(["calls", "config", "where"])
    asks = TEMPLATES[spec.split][kind]
    qi = spec.facts.randrange(len(asks)) if len(asks) > 1 else 0  # no draw for one wording: test, heldout as pinned
    state = spec.facts.getstate()
    n_funcs = max(3, min(30, spec.length // 400))
    while True:  # shrink the repository until it fits short lengths
        spec.facts.setstate(state)
        files, q, gold, blocks = _repo(spec, kind, asks[qi], n_funcs)
        if sum(len(b) + 2 for b in blocks) <= spec.length or n_funcs == 3:
            break
        n_funcs -= 1
    rng = spec.place
    rng.shuffle(blocks)
    context, positions = haystack.weave(rng, spec.length, blocks, kind=spec.haystack_kind,
                                        boundary="\n" + haystack.FILE_HEADER)
    spec.positions = positions
    template = f"{FAMILY}/{spec.split}/{kind}{qi}+style0"
    return assemble(spec, q, context, gold, template, values=[gold.answer],
                    extra={"kind": kind, "files": sorted(files)})
