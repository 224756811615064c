"""`bios`: where does a person live now? The answer sits in a one-line passage of free prose about them.

Code finds the passage cheaply (grep for the person's name) but cannot read it reliably: the city can
come first or last, beside a former city ("formerly of Oslo, now lives in Lisbon") or a denied one ("does
not live in Oslo; ... lives in Lisbon"), and each split words its passages differently. A sub-call over
the passage can. Distractors: passages about near-duplicate names (same first or last name), corrections,
negations, and at the hardest tier a passage that mentions the person in passing in another city.

Unlike the other families, the true passage may carry a stale word ("formerly"): reading past it is the task.
`read(prompt)` is the generator's own answer to a sub-call over its passages (the SFT teacher's sub-call
replies): it inverts the templates, which is what no short program in the REPL can do for unseen wordings.
"""

from __future__ import annotations

import re
from functools import lru_cache

from fathom.tasks import haystack, vocab
from fathom.tasks.families.base import Spec, assemble, pick
from fathom.tasks.record import Gold, Task

FAMILY = "bios"

# Slots: n the person's full name (once), f their first name, c the city they live in now (once), o a former
# city, x a city they do not live in, m another person's name, j a job, y a year, k a number of years.
TEMPLATES = {
    "train": {
        "plain": ["{n} works as a {j} and lives in {c}.",
                  "{c} has been home to {n}, a {j}, for {k} years.",
                  "Most mornings {n} walks to work through the old town of {c}, where {f} has a flat.",
                  "The {j} {n} keeps a small house in {c} and rarely leaves it."],
        "moved": ["{n}, formerly of {o}, now lives in {c} and works as a {j}.",
                  "{n} lived in {o} until {y}; since then {f} has lived in {c}.",
                  "After years in {o}, {n} moved to {c}, which {f} now calls home."],
        "denied": ["{n} does not live in {x}, whatever the rumours say: {f} lives in {c}.",
                   "Contrary to the old staff list, {n} is not based in {x} but lives in {c}.",
                   "{n} never settled in {x}; the {j} lives in {c}."],
        "mention": ["{m} met {n} once, on a trip to {x}.",
                    "On a visit to {x}, {m} talked shop with {n} for an hour."],
        "question": ["In which city does {n} live now? Answer with the city name only.",
                     "{n} lives in one city today. Which city? Answer with its name only.",
                     "Where does {n} currently live? Give only the city.",
                     "What city is the home of {n} these days? Reply with the city name.",
                     "Read what the text says about {n} and answer: which city does this person live in?"],
    },
    "test": {
        "plain": ["{n}, a {j} by trade, resides in {c}.", "Anyone in {c} can tell you where the {j} {n} lives."],
        "moved": ["Once a resident of {o}, {n} relocated to {c} in {y}."],
        "denied": ["It is {c}, not {x}, where {n} lives."],
        "mention": ["{m} shared a train to {x} with {n} last winter."],
        "question": ["Which city is home to {n} at present? Answer with the city name only."],
    },
    "heldout": {
        "plain": ["Home for {n} is {c}, where {f} works as a {j}.", "{n} rents rooms above a bakery in {c}."],
        "moved": ["{n} left {o} in {y} and has been living in {c} ever since."],
        "denied": ["Although people assume {n} lives in {x}, {f} actually lives in {c}."],
        "mention": ["At a fair in {x}, {m} ran into {n}."],
        "question": ["Tell me the city {n} lives in today, and nothing else."],
    },
}

CITIES = {
    "train": ["Lisbon/Portugal", "Oslo/Norway", "Lyon/France", "Porto/Portugal", "Graz/Austria", "Leeds/England",
              "Turin/Italy", "Ghent/Belgium", "Malmo/Sweden", "Bilbao/Spain", "Krakow/Poland", "Tampere/Finland",
              "Utrecht/Netherlands", "Dresden/Germany", "Cork/Ireland", "Brno/Czechia", "Seville/Spain",
              "Bergen/Norway"],
    "test": ["Quito/Ecuador", "Osaka/Japan", "Perth/Australia", "Denver/USA", "Halifax/Canada", "Cusco/Peru",
             "Pune/India", "Hanoi/Vietnam", "Nairobi/Kenya", "Recife/Brazil", "Busan/Korea", "Tbilisi/Georgia",
             "Adelaide/Australia", "Calgary/Canada", "Mendoza/Argentina", "Kyoto/Japan", "Accra/Ghana",
             "Tucson/USA"],
    "heldout": ["Zurich/Switzerland", "Riga/Latvia", "Kaunas/Lithuania", "Tallinn/Estonia", "Ljubljana/Slovenia",
                "Vilnius/Lithuania", "Bratislava/Slovakia", "Sofia/Bulgaria", "Valletta/Malta", "Reykjavik/Iceland",
                "Aarhus/Denmark", "Basel/Switzerland", "Lausanne/Switzerland", "Salzburg/Austria", "Bordeaux/France",
                "Bologna/Italy", "Granada/Spain", "Galway/Ireland"],
}
"""`City/Country`, a third per split, so a held-out answer is never a city the model saw in training."""

JOBS = ["baker", "nurse", "pilot", "tailor", "chemist", "architect", "carpenter", "librarian", "translator",
        "violinist", "surveyor", "glassblower"]
LIVES = ("plain", "moved", "denied")


def _fill(rng, tpl: str, name: str, city: str, cities: list[str], other: str) -> str:
    o, x = rng.sample([c for c in cities if c != city], 2)
    return tpl.format(n=name, f=name.split()[0], c=city, o=o, x=x, m=other, j=rng.choice(JOBS),
                      y=rng.randrange(1995, 2024), k=rng.randrange(2, 30))


def _near(rng, name: str, split: str, taken: set[str]) -> str:
    """A name that shares its first or its last name with `name`."""
    first, last = name.split()
    options = [f"{first} {x}" for x in vocab.part(vocab.LAST_NAMES, split)]
    options += [f"{x} {last}" for x in vocab.part(vocab.FIRST_NAMES, split)]
    return rng.choice([o for o in options if o not in taken and o != name])


def generate(spec: Spec) -> Task:
    rng, split, t, d = spec.facts, spec.split, TEMPLATES[spec.split], spec.difficulty
    q, qid = pick(rng, t["question"], "q", split, FAMILY)
    n_other = (2 if spec.length < 4096 else 4) + d
    people = vocab.person_names(rng, split, 1 + n_other)
    who, others = people[0], people[1:]
    cities = [c.split("/")[0] for c in CITIES[split]]
    countries = dict(c.split("/") for c in CITIES[split])
    home = rng.choice(cities)
    kind = rng.choice(["moved", "denied"]) if spec.distractors else "plain"
    tpl, tid = pick(rng, t[kind], kind, split, FAMILY)
    passages = [_fill(rng, tpl, who, home, cities, others[0])]
    taken = set(people)
    for i in range(d if spec.distractors else 0):  # near-duplicate names living elsewhere
        near = _near(rng, who, split, taken)
        taken.add(near)
        passages.append(_fill(rng, rng.choice(t[rng.choice(LIVES)]), near, rng.choice(cities), cities, who))
    if spec.distractors and d == 2:  # the person named in passing, in a city they do not live in
        passages.append(_fill(rng, rng.choice(t["mention"]), who, home, cities, others[-1]))
    for p in others:
        passages.append(_fill(rng, rng.choice(t[rng.choice(LIVES)]), p, rng.choice(cities), cities, who))
    order = list(range(len(passages)))
    rng.shuffle(order)
    context, positions = haystack.weave(spec.place, spec.length, [passages[i] for i in order],
                                        kind=spec.haystack_kind)
    spec.positions = [positions[order.index(0)]] + sorted(positions[j] for j, i in enumerate(order) if i != 0)
    gold = Gold(answer=home, aliases=[f"{home}, {countries[home]}"], type="string")
    return assemble(spec, q.format(n=who), context, gold, f"{tid}+{qid}", values=[home],
                    extra={"person": who, "kind": kind, "passages": len(passages)})


_SLOT = {"n": r"(?P<n>[A-Z][a-z]+ [A-Z][a-z]+)", "c": r"(?P<c>[A-Z][a-z]+)", "f": r"[A-Z][a-z]+",
         "o": r"[A-Z][a-z]+", "x": r"[A-Z][a-z]+", "m": r"[A-Z][a-z]+ [A-Z][a-z]+", "j": r"[a-z]+",
         "y": r"\d{4}", "k": r"\d+"}


def _pattern(tpl: str) -> re.Pattern[str]:
    parts = re.split(r"\{(\w)\}", tpl)  # literal, slot, literal, slot, ...
    return re.compile("".join(re.escape(p) if i % 2 == 0 else _SLOT[p] for i, p in enumerate(parts)))


@lru_cache(maxsize=1)
def _patterns() -> tuple[list[re.Pattern[str]], list[re.Pattern[str]]]:
    lives = [_pattern(x) for s in TEMPLATES.values() for k in LIVES for x in s[k]]
    asks = [_pattern(x) for s in TEMPLATES.values() for x in s["question"]]
    return lives, asks


def read(prompt: str) -> str | None:
    """The city a sub-call prompt's passages give for the person its question asks about, or None when the
    prompt holds no question and passage of this family (the teacher's answer to its own sub-calls)."""
    lives, asks = _patterns()
    asked = next((m.group("n") for p in asks for m in [p.search(prompt)] if m), None)
    if asked is None:
        return None
    for line in prompt.splitlines():
        for p in lives:
            m = p.fullmatch(line.strip())
            if m and m.group("n") == asked:
                return m.group("c")
    return None
