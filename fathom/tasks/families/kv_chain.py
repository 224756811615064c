"""`kv_chain`: multi-hop. The answer is reached by following a -> b -> c ... -> value across the document.

Links are scattered in order-free positions, so the chain must be followed, not read top to
bottom. Distractors: other chains with their own values, and a stale link out of a chain node.
"""

from __future__ import annotations

from fathom.tasks import haystack, vocab
from fathom.tasks.families.base import Spec, assemble, pick
from fathom.tasks.record import Gold, Task

FAMILY = "kv_chain"

TEMPLATES = {
    "train": {
        "link": ["{a} points to {b}.", "The entry {a} refers onward to {b}."],
        "value": ["{b} holds the value {v}.", "The entry {b} resolves to the value {v}."],
        "stale": ["{a} formerly pointed to {b}, but that link was revoked."],
        # The start key sits at the start, middle or end and among different words, so that SFT and GRPO teach
        # copying it out of the question rather than out of one position.
        "question": ["Start at {a} and follow the links until you reach a value. What is that value?",
                     "{a} is the first entry of a chain. Follow it to the end and give the value there.",
                     "Which value do you reach if you follow the links from {a}?",
                     "Follow the entries onward from {a} until one gives a value, and report that value.",
                     "The chain opens with {a}. Follow every link: what value is at its end?",
                     "What value comes out when you follow the entries starting from {a}?",
                     "Take {a} as the starting point, follow where each entry points, and answer with the final value."],
    },
    "test": {
        "link": ["{a} forwards to {b}.", "Go from {a} straight on to {b}."],
        "value": ["The value stored at {b} is {v}.", "{b} contains the final value {v}."],
        "stale": ["An obsolete link sent {a} to {b}."],
        "question": ["Beginning with {a}, follow each reference until it ends in a value. Which value is it?"],
    },
    "heldout": {
        "link": ["Link: {a} leads to {b}.", "From {a} continue with {b}."],
        "value": ["Terminal {b} carries value {v}.", "{b} ends the trail with value {v}."],
        "stale": ["Retired link: {a} once led to {b}."],
        "question": ["Follow the chain that starts at {a}. What value does it end in?"],
    },
}


def _chain(keys: list[str], value: int, link: str, val: str) -> list[str]:
    out = [link.format(a=a, b=b) for a, b in zip(keys, keys[1:])]
    out.append(val.format(b=keys[-1], v=value))
    return out


def generate(spec: Spec) -> Task:
    rng, t = spec.facts, TEMPLATES[spec.split]
    hops = 2 + spec.difficulty
    n_other = (1 + spec.difficulty) if spec.distractors else 0
    keys = vocab.keys(rng, spec.split, hops * (1 + n_other))
    link, lid = pick(rng, t["link"], "l", spec.split, FAMILY)
    val, vid = pick(rng, t["value"], "v", spec.split, FAMILY)
    q, qid = pick(rng, t["question"], "q", spec.split, FAMILY)
    values = [vocab.value(rng, spec.split) for _ in range(1 + n_other)]
    chain = keys[:hops]
    facts = _chain(chain, values[0], link, val)
    for i in range(n_other):
        facts += _chain(keys[hops * (i + 1):hops * (i + 2)], values[i + 1], link, val)
    if n_other:
        # A revoked link from the start node into a distractor chain: following it gives a wrong value.
        facts.append(t["stale"][0].format(a=chain[0], b=keys[hops]))
    order = list(range(len(facts)))
    rng.shuffle(order)
    context, positions = haystack.weave(spec.place, spec.length, [facts[i] for i in order], kind=spec.haystack_kind)
    spec.positions = [positions[order.index(i)] for i in range(hops)]
    gold = Gold(answer=str(values[0]), type="number")
    return assemble(spec, q.format(a=chain[0]), context, gold, f"{lid}+{vid}+{qid}",
                    values=[str(v) for v in values], extra={"chain": chain, "hops": hops})
