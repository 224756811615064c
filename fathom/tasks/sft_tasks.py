"""Which tasks the SFT warm start records: `sft.families`, `sft.lengths` and `sft.question_phrasings` resolved
to task ids in the train seed block."""

from __future__ import annotations

from typing import Any


def check_phrasings(sft: Any) -> None:
    """ValueError naming a `sft.question_phrasings` entry that names no choosable phrasing."""
    from fathom.tasks.generate import FAMILIES, question_phrasings

    for fam, keep in sft.question_phrasings.items():
        n = len(question_phrasings(fam))
        if not n:
            worded = ", ".join(f for f in FAMILIES if question_phrasings(f))
            raise ValueError(f"sft.question_phrasings names {fam!r}, whose questions have no train phrasings to "
                             f"choose from (only {worded} have). Remove that entry.")
        bad = [i for i in keep if not 0 <= i < n]
        if not keep or bad:
            raise ValueError(f"sft.question_phrasings[{fam!r}] = {keep}: give one or more indices from 0 to {n - 1} "
                             f"(the {n} train phrasings of {fam}).")


def sft_task_ids(sft: Any) -> list[str]:
    """The SFT data's tasks: families and lengths round-robin, slot i on seed `sft.seed + i` in the train block.

    A slot whose family `sft.question_phrasings` narrows, and whose question is worded in a phrasing left out,
    moves on by whole strides of `n_tasks` seeds (`sft.seed + i + k * n_tasks`) until one is kept. Each slot keeps
    to its own seeds, so narrowing one family's phrasings leaves every other family's tasks as they were.

    ValueError names a bad `sft.question_phrasings` entry, or settings that would run past the train block."""
    from fathom.tasks.generate import generate, question_phrasing
    from fathom.tasks.record import SEED_BLOCK, make_id

    check_phrasings(sft)
    fams, lens, n = sft.families, sft.lengths, sft.n_tasks
    ids = []
    for i in range(n):
        fam, length = fams[i % len(fams)], lens[(i // len(fams)) % len(lens)]
        keep = sft.question_phrasings.get(fam)
        seed = sft.seed + i
        while seed < SEED_BLOCK and keep is not None and question_phrasing(generate(fam, seed, length)) not in keep:
            seed += n
        if seed >= SEED_BLOCK:
            raise ValueError(f"sft.seed = {sft.seed} with sft.n_tasks = {n}: SFT task {i} ({fam}) ran past the train "
                             f"seed block (seeds below {SEED_BLOCK}). Lower sft.seed or sft.n_tasks, or keep more "
                             f"of {fam}'s phrasings in sft.question_phrasings.")
        ids.append(make_id(fam, seed, length))
    return ids
