"""`pairs`: OOLONG-Pairs style. List the pairs of records that cite the same ticket and share a label.

Every other record has a unique ticket. Near misses (same ticket, different inferred label)
are always present, since telling them apart is the task; distractors add void records that
share a ticket with a matching one.
"""

from __future__ import annotations

from fathom.tasks import vocab
from fathom.tasks.families import records as R
from fathom.tasks.families.base import Lines, Spec, assemble, pad, pick
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

_TICKETS = 1_000_000


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
    # Tickets are a seeded permutation of 0..999999: record k gets perm(k) and planted group g
    # gets perm(999999 - g), so tickets are unique except within a group, without storing a set.
    mul = rng.randrange(1, _TICKETS // 10) * 10 + rng.choice([1, 3, 7, 9])  # coprime with 10**6
    add = rng.randrange(_TICKETS)

    def ticket(k: int) -> int:
        return (k * mul + add) % _TICKETS

    groups = [[label, label] for _ in range(n_true)]
    groups += [[label, rng.choice(others)] for _ in range(n_near)]
    groups += [[label, label] for _ in range(n_void)]
    fmt, void_tag = R.PAIR_FORMATS[split], R.VOID[split]
    planted = []  # (group, name, text, void); lines are fixed-width in id and ticket, so size them now
    for g, labs in enumerate(groups):
        for j, lab in enumerate(labs):
            planted.append((g, rng.choice(names), R.text(rng, split, lab), g >= n_true + n_near and j == 1))
    sizes = [len(fmt.format(i=0, n=p[1], t=0, x=p[2])) + 1 + len(void_tag) * p[3] for p in planted]
    reserve = sum(sizes)
    if reserve > spec.length:
        raise ValueError(f"length {spec.length} is too short for a pairs task; use at least 2k")
    room = spec.length - reserve
    # Each planted record goes in where the filler has reached a uniformly drawn offset.
    at = sorted((rng.randrange(room + 1), k) for k in range(len(planted)))
    members: list[list[str]] = [[] for _ in groups]
    out, filler_size, nxt, k = Lines(), 0, 0, 0
    spec.positions = []

    def emit_planted(p: tuple[int, str, str, bool]) -> None:
        off = out.add(fmt.format(i=out.count + 1, n=p[1], t=ticket(_TICKETS - 1 - p[0]), x=p[2])
                      + (void_tag if p[3] else ""))
        members[p[0]].append(R.record_id(out.count))
        if p[0] < n_true:
            spec.positions.append(off)

    while True:
        while nxt < len(at) and at[nxt][0] <= filler_size:
            emit_planted(planted[at[nxt][1]])
            nxt += 1
        line = fmt.format(i=out.count + 1, n=rng.choice(names), t=ticket(k),
                          x=R.text(rng, split, R.draw_label(rng)))
        if filler_size + len(line) + 1 > room:
            break
        out.add(line)
        filler_size += len(line) + 1
        k += 1
    for _, idx in at[nxt:]:
        emit_planted(planted[idx])
    pairs = sorted("|".join(sorted(m)) for m in members[:n_true])
    gold = Gold(answer="; ".join(p.replace("|", " & ") for p in pairs), type="set", items=pairs)
    question = q.format(label=label) + (R.VOID_NOTE[split] if spec.distractors else "")
    n_records = out.count
    return assemble(spec, question, pad(spec, out), gold, f"{FAMILY}/{split}/records+{qid}",
                    extra={"label": label, "records": n_records, "true_pairs": n_true, "near_misses": n_near})
