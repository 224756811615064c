"""Labelled review records shared by `aggregate` and `pairs` (OOLONG style).

A record's label (positive, negative, neutral) is never a column: it must be inferred from
the review text, which mixes a neutral opener with a label-bearing phrase. Phrase banks and
line formats are split three ways so no wording is shared between train, test and heldout.
"""

from __future__ import annotations

import random

LABELS = ("positive", "negative", "neutral")

PHRASES = {
    "train": {
        "positive": ["absolutely loved it", "exceeded every expectation", "would happily buy again",
                     "best purchase this year"],
        "negative": ["broke after one day", "complete waste of money", "deeply disappointed",
                     "arrived damaged and useless"],
        "neutral": ["arrived on the expected day", "it is a standard model", "does what the label says",
                    "packaging was plain"],
    },
    "test": {
        "positive": ["works wonderfully", "really delighted with it", "five stars from me", "superb build quality"],
        "negative": ["stopped working within a week", "would never order again", "cheap and flimsy",
                     "a frustrating mess"],
        "neutral": ["nothing remarkable either way", "ordinary in most respects", "about what I expected",
                    "color matches the photo"],
    },
    "heldout": {
        "positive": ["thrilled with the result", "could not be happier", "a real pleasure to use",
                     "fantastic value overall"],
        "negative": ["fell apart immediately", "utterly unacceptable", "regret buying this", "poor and unreliable"],
        "neutral": ["delivered in a brown box", "an average kind of item", "functions as described",
                    "came with a manual"],
    },
}

OPENERS = {
    "train": ["Ordered this for the kitchen;", "Bought it last month;", "Picked one up on sale;"],
    "test": ["Got this as a gift;", "Second order from this shop;", "Used it over the weekend;"],
    "heldout": ["Tried it at the office;", "Replaced my old one;", "Shared it with my family;"],
}

# Format fields: i (record id), n (customer name), a (amount), t (ticket), x (review text).
AGG_FORMATS = {
    "train": "Record R{i:06d} | customer: {n} | amount: {a} | review: {x}",
    "test": '#R{i:06d} :: {n} paid {a} :: "{x}"',
    "heldout": "[R{i:06d}] {n} / {a} units / {x}",
}
PAIR_FORMATS = {
    "train": "Record R{i:06d} | customer: {n} | ticket: T{t:06d} | review: {x}",
    "test": '#R{i:06d} :: {n} :: ticket T{t:06d} :: "{x}"',
    "heldout": "[R{i:06d}] {n} / T{t:06d} / {x}",
}
VOID = {"train": " (retracted)", "test": " [void]", "heldout": " {withdrawn}"}
"""Appended to records that no longer count (a distractor); questions say to ignore them."""

VOID_NOTE = {
    "train": " Records marked (retracted) do not count.",
    "test": " Ignore records tagged [void].",
    "heldout": " Records flagged {withdrawn} are excluded.",
}


def draw_label(rng: random.Random) -> str:
    r = rng.random()
    return "positive" if r < 0.4 else "negative" if r < 0.75 else "neutral"


def text(rng: random.Random, split: str, label: str) -> str:
    return f"{rng.choice(OPENERS[split])} {rng.choice(PHRASES[split][label])}."


def record_id(i: int) -> str:
    return f"R{i:06d}"
