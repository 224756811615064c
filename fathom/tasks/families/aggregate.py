"""`aggregate`: OOLONG style. Count, sum or argmax over labelled records whose labels must be inferred.

The document is a review log filling the whole length (thousands of records at 256K+).
Distractors: some records are marked void in the split's wording and must be left out.
"""

from __future__ import annotations

from collections import Counter

from fathom.tasks import vocab
from fathom.tasks.families import records as R
from fathom.tasks.families.base import Spec, assemble, pad, pick
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
    fmt = R.AGG_FORMATS[split]
    names = vocab.person_names(rng, split, max(4, min(60, spec.length // 2400)))
    void_rate = 0.04 * (1 + spec.difficulty) if spec.distractors else 0.0
    rows: list[tuple[str, int, str, bool]] = []  # (name, amount, label, void)
    lines: list[str] = []
    size, limit = 0, spec.length - _RESERVE
    while True:
        row = (rng.choice(names), rng.randrange(1, 500), R.draw_label(rng), rng.random() < void_rate)
        line = fmt.format(i=len(rows) + 1, n=row[0], a=row[1], x=R.text(rng, split, row[2]))
        if row[3]:
            line += R.VOID[split]
        if size + len(line) + 1 > limit:
            break
        rows.append(row)
        lines.append(line)
        size += len(line) + 1
    live = [r for r in rows if not r[3] and r[2] == label]
    if op == "argmax":
        counts = Counter(r[0] for r in live)
        top = max(counts.values(), default=0)
        tied = sorted(n for n in names if counts.get(n, 0) == top)
        if len(tied) > 1:  # make the winner unique with one more live record for one of the tied
            row = (rng.choice(tied), rng.randrange(1, 500), label, False)
            rows.append(row)
            lines.append(fmt.format(i=len(rows), n=row[0], a=row[1], x=R.text(rng, split, label)))
            counts[row[0]] += 1
        answer = counts.most_common(1)[0][0]
        gold = Gold(answer=answer, type="string")
    else:
        total = len(live) if op == "count" else sum(r[1] for r in live)
        gold = Gold(answer=str(total), type="number")
    question = q.format(label=label) + (R.VOID_NOTE[split] if spec.distractors else "")
    context = pad(spec, "\n".join(lines))
    return assemble(spec, question, context, gold, f"{FAMILY}/{split}/records+{qid}",
                    extra={"op": op, "label": label, "records": len(rows),
                           "void": sum(r[3] for r in rows)})
