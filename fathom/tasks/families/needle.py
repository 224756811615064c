"""`needle`: S-NIAH style. One to four keyed facts hidden in a haystack; the question asks for one.

Distractors: the asked key also appears in a stale statement with another value, and
near-duplicate keys (sharing one word with the asked key) carry their own values.
"""

from __future__ import annotations

from fathom.tasks import haystack, vocab
from fathom.tasks.families.base import Spec, assemble, pick
from fathom.tasks.record import Gold, Task

FAMILY = "needle"

TEMPLATES = {
    "train": {
        "fact": ["The special magic number for {k} is {v}.", "Remember this: the magic number of {k} is {v}."],
        "stale": ["An outdated note gave {k} the magic number {v}, which no longer applies."],
        # The key sits at the start, middle or end and among different words, so that SFT and GRPO teach copying
        # it out of the question rather than out of one position.
        "question": ["What is the special magic number for {k} mentioned in the document?",
                     "Which magic number does the text give for {k}?",
                     "{k}: which magic number does the document assign to it?",
                     "The document records a magic number for {k}. Give that number.",
                     "Tell me the magic number of {k} as the document states it.",
                     "Look up {k} in the document and answer with its magic number.",
                     "According to the document, {k} has which magic number?",
                     "I need the current magic number of the entry {k}. What does the document say?"],
    },
    "test": {
        "fact": ["One of the special magic numbers for {k} is: {v}.", "Keep in mind that {k} has the magic number {v}."],
        "stale": ["Ignore the superseded magic number {v} once listed for {k}."],
        "question": ["Find the magic number associated with {k} in the document. Reply with the number only."],
    },
    "heldout": {
        "fact": ["Magic number on file for {k}: {v}.", "For the record, {k} carries magic number {v}."],
        "stale": ["The retired magic number for {k} was {v}; it is obsolete."],
        "question": ["Somewhere in this text a magic number is stated for {k}. What is it?"],
    },
}


def generate(spec: Spec) -> Task:
    rng, t = spec.facts, TEMPLATES[spec.split]
    n = [1, rng.randrange(2, 4), 4][spec.difficulty]
    keys = vocab.keys(rng, spec.split, n)
    values = [vocab.value(rng, spec.split) for _ in keys]
    fact, fid = pick(rng, t["fact"], "f", spec.split, FAMILY)
    q, qid = pick(rng, t["question"], "q", spec.split, FAMILY)
    facts = [fact.format(k=k, v=v) for k, v in zip(keys, values)]
    planted = [str(v) for v in values]
    if spec.distractors:
        stale_v = vocab.value(rng, spec.split)
        facts.append(t["stale"][0].format(k=keys[0], v=stale_v))
        taken = set(keys)
        for _ in range(1 + spec.difficulty):
            near = vocab.near_key(rng, keys[0], spec.split, taken)
            taken.add(near)
            v = vocab.value(rng, spec.split)
            facts.append(fact.format(k=near, v=v))
            planted.append(str(v))
        planted.append(str(stale_v))
    order = list(range(len(facts)))
    rng.shuffle(order)
    context, positions = haystack.weave(spec.place, spec.length, [facts[i] for i in order], kind=spec.haystack_kind)
    spec.positions = [positions[order.index(0)]] + sorted(positions[j] for j, i in enumerate(order) if i != 0)
    gold = Gold(answer=str(values[0]), type="number")
    return assemble(spec, q.format(k=keys[0]), context, gold, f"{fid}+{qid}", values=planted,
                    extra={"key": keys[0], "n_needles": n})
