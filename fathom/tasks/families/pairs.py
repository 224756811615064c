"""`pairs`: OOLONG-Pairs style. List the pairs of records that cite the same ticket and share a label.

Every other record has a unique ticket. Near misses (same ticket, different inferred label)
are always present, since telling them apart is the task; distractors add void records that
share a ticket with a matching one.
"""

from __future__ import annotations

from fathom.tasks import vocab
from fathom.tasks.families import records as R
from fathom.tasks.families.base import Spec, assemble, pad, pick
from fathom.tasks.record import Gold, Task

FAMILY = "pairs"

TEMPLATES = {
    "train": {"question": ["List every pair of records that cite the same ticket where both reviews are {label}. "
                           "Give each pair as (id, id)."]},
    "test": {"question": ["Which pairs of records share a ticket number and are both {label} in tone? "
                          "Answer with the pairs of record ids."]},
    "heldout": {"question": ["Find all pairs of {label} reviews that refer to the same ticket; "
                             "list the record id pairs."]},
}


def generate(spec: Spec) -> Task:
    rng, split = spec.facts, spec.split
    label = rng.choice(["positive", "negative"])
    others = [x for x in R.LABELS if x != label]
    q, qid = pick(rng, TEMPLATES[split]["question"], "q", split, FAMILY)
    small = spec.length < 4096
    n_true = 1 if small else rng.randrange(*[(1, 3), (2, 5), (4, 7)][spec.difficulty])
    n_near = 1 if small else 1 + spec.difficulty
    n_void = (0 if small else 1 + spec.difficulty // 2) if spec.distractors else 0
    names = vocab.person_names(rng, split, max(4, min(60, spec.length // 2400)))
    # Planted groups: (label, void) per member; all members of a group share one ticket.
    groups = [[(label, False), (label, False)] for _ in range(n_true)]
    groups += [[(label, False), (rng.choice(others), False)] for _ in range(n_near)]
    groups += [[(label, False), (label, True)] for _ in range(n_void)]
    fmt, void = R.PAIR_FORMATS[split], R.VOID[split]
    # Line length does not depend on id or ticket (fixed width), so size with placeholders.
    rows: list[tuple[int, str, str, bool]] = []  # (group or -1, name, text, void)
    size = 0
    for g, members in enumerate(groups):
        for lab, is_void in members:
            row = (g, rng.choice(names), R.text(rng, split, lab), is_void)
            rows.append(row)
            size += len(fmt.format(i=0, n=row[1], t=0, x=row[2])) + len(void) * is_void + 1
    if size > spec.length:
        raise ValueError(f"length {spec.length} is too short for a pairs task; use at least 2k")
    planted = len(rows)
    while True:
        row = (-1, rng.choice(names), R.text(rng, split, R.draw_label(rng)), False)
        n = len(fmt.format(i=0, n=row[1], t=0, x=row[2])) + 1
        if size + n > spec.length:
            break
        rows.append(row)
        size += n
    filler = rows[planted:]
    order = rows[:planted]
    for r in order:  # scatter planted records among the filler at random positions
        filler.insert(rng.randrange(len(filler) + 1), r)
    tickets = rng.sample(range(1, 1_000_000), len(filler) + len(groups))
    group_ticket = tickets[len(filler):]
    lines, members, offset = [], [[] for _ in groups], 0
    spec.positions = []
    for i, (g, name, txt, is_void) in enumerate(filler, start=1):
        t = group_ticket[g] if g >= 0 else tickets[i - 1]
        lines.append(fmt.format(i=i, n=name, t=t, x=txt) + (void if is_void else ""))
        if g >= 0:
            members[g].append(R.record_id(i))
            if g < n_true:
                spec.positions.append(offset)
        offset += len(lines[-1]) + 1
    pairs = sorted("|".join(sorted(m)) for m in members[:n_true])
    gold = Gold(answer="; ".join(p.replace("|", " & ") for p in pairs), type="set", items=pairs)
    question = q.format(label=label) + (R.VOID_NOTE[split] if spec.distractors else "")
    return assemble(spec, question, pad(spec, "\n".join(lines)), gold, f"{FAMILY}/{split}/records+{qid}",
                    extra={"label": label, "records": len(filler), "true_pairs": n_true, "near_misses": n_near})
