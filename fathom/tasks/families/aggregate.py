"""`aggregate`: OOLONG style. Count, sum or argmax over labelled records whose labels must be inferred.

The document is a review log filling the whole length (thousands of records at 256K+).
Distractors: some records are marked void in the split's wording and must be left out.
"""

from __future__ import annotations

from collections import Counter

from fathom.tasks import vocab
from fathom.tasks.families import records as R
from fathom.tasks.families.base import Lines, Spec, assemble, pad, pick
from fathom.tasks.record import Gold, Task

FAMILY = "aggregate"

TEMPLATES = {
    "train": {"count": ["How many of the reviews below are {label} in tone?"],
              "sum": ["What is the total amount paid by customers whose review is {label}?"],
              "argmax": ["Which customer left the largest number of {label} reviews?"]},
    "test": {"count": ["Count the {label} reviews in this log."],
             "sum": ["Add up the amounts of every {label} review. What is the sum?"],
             "argmax": ["Who is the customer with the most {label} reviews?"]},
    "heldout": {"count": ["In total, how many {label} reviews appear?"],
                "sum": ["Sum the amount field over the {label} reviews."],
                "argmax": ["Name the customer responsible for the most {label} reviews."]},
}

_RESERVE = 200  # room for one tie-breaking record, which is at most ~170 characters


def generate(spec: Spec) -> Task:
    rng, split = spec.facts, spec.split
    op = rng.choice(["count", "sum", "argmax"])
    label = rng.choice(["positive", "negative", "neutral"])
    q, qid = pick(rng, TEMPLATES[split][op], op, split, FAMILY)
    fmt, void_tag = R.AGG_FORMATS[split], R.VOID[split]
    names = vocab.person_names(rng, split, max(4, min(60, spec.length // 2400)))
    void_rate = 0.04 * (1 + spec.difficulty) if spec.distractors else 0.0
    out = Lines()
    counts: Counter[str] = Counter()
    total = voids = 0
    limit = spec.length - _RESERVE
    while True:
        name, amount, lab, void = rng.choice(names), rng.randrange(1, 500), R.draw_label(rng), rng.random() < void_rate
        line = fmt.format(i=out.count + 1, n=name, a=amount, x=R.text(rng, split, lab)) + (void_tag if void else "")
        if out.size + len(line) + 1 > limit:
            break
        out.add(line)
        voids += void
        if lab == label and not void:
            counts[name] += 1
            total += amount
    if op == "argmax":
        top = max(counts.values(), default=0)
        tied = sorted(n for n in names if counts.get(n, 0) == top)
        if len(tied) > 1:  # make the winner unique with one more live record for one of the tied
            name, amount = rng.choice(tied), rng.randrange(1, 500)
            out.add(fmt.format(i=out.count + 1, n=name, a=amount, x=R.text(rng, split, label)))
            counts[name] += 1
        gold = Gold(answer=counts.most_common(1)[0][0], type="string")
    else:
        gold = Gold(answer=str(sum(counts.values()) if op == "count" else total), type="number")
    question = q.format(label=label) + (R.VOID_NOTE[split] if spec.distractors else "")
    n_records = out.count
    return assemble(spec, question, pad(spec, out), gold, f"{FAMILY}/{split}/records+{qid}",
                    extra={"op": op, "label": label, "records": n_records, "void": voids})
