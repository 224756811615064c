"""Names and values the generators plant, partitioned by split.

Word lists are split three ways by index (train, test, heldout) and planted numbers carry
their split in their residue mod 3, so no key or needle value can appear in two splits.
Train keys also draw on words no other split has (TRAIN_ADJECTIVES, TRAIN_NOUNS): with
only its third of the shared lists, the SFT adapter recalled train words instead of copying
an unseen key from the question.
"""

from __future__ import annotations

import random

from fathom.tasks.record import SPLITS

ADJECTIVES = (
    "amber azure bronze cobalt coral crimson dusky ebony fallow golden hazel indigo ivory jade khaki lilac "
    "maroon ochre olive pearl plum russet sable scarlet sepia silver slate tawny teal umber velvet violet "
    "wintry ashen bright calm dim eager fleet grave hollow keen lucid mellow nimble proud quiet rapid stark"
).split()

NOUNS = (
    "falcon heron otter badger lynx marten osprey raven thrush wren beacon bridge canal citadel delta "
    "estuary fjord glacier harbor island jetty knoll lagoon meadow orchard quarry ridge spire summit tundra "
    "valley anvil bellows chisel compass lantern ledger mortar pulley quill sextant spindle tiller trowel "
    "winch yardarm zephyr"
).split()

TRAIN_ADJECTIVES = (
    "aqua beige blush cerise copper dapper dusty emerald fawn flaxen frosty gilded glossy granite hushed lavish "
    "lunar mauve misty mossy muted opal rosy rustic sandy shady smoky snowy sunny topaz twilit vivid wispy woolly"
).split()

TRAIN_NOUNS = (
    "acorn alcove arbor atoll basin bluff brook burrow cairn canyon cove crag dune fern geyser grotto gully "
    "hamlet hearth inlet kestrel loch mesa moor nook oasis pebble plover prairie reef shoal starling thicket "
    "warbler weir willow"
).split()

FIRST_NAMES = (
    "Ada Bram Cleo Dov Esme Finn Gia Hugo Iris Jude Kai Lena Milo Nia Omar Pia Quinn Rhea Saul Tova Uma "
    "Vito Wren Xena Yara Zane Abel Bea Cyrus Dana Eli Fay Gus Hana Ivo Jana Kurt Lila Max Nell Otto Pax "
    "Rosa Seth Tess Ugo Vera Walt"
).split()

LAST_NAMES = (
    "Abbot Baird Crane Dunn Ellis Frost Grady Hale Irwin Joyce Kemp Lowry Marsh Noble Orton Pratt Quill "
    "Reyes Shaw Tate Underhill Vance Webb Yates Zeller Ames Boyd Cobb Drake Eaton Fenn Gage Hayes Ives "
    "Judd Keane Lott Mace Nash Oakes Pike Rowe Sloan Toft Upton Vail Wick York"
).split()


def split_index(split: str) -> int:
    return SPLITS.index(split)


def part(words: list[str] | tuple[str, ...], split: str) -> list[str]:
    """The third of `words` that belongs to `split`."""
    return list(words[split_index(split)::3])


def key_words(split: str) -> tuple[list[str], list[str]]:
    """The adjectives and nouns that `split`'s keys are made of."""
    adj, noun = part(ADJECTIVES, split), part(NOUNS, split)
    if split == "train":
        return adj + TRAIN_ADJECTIVES, noun + TRAIN_NOUNS
    return adj, noun


def keys(rng: random.Random, split: str, n: int) -> list[str]:
    """`n` distinct `adjective-noun` keys from the split's key words."""
    adj, noun = key_words(split)
    pool = [f"{a}-{b}" for a in adj for b in noun]
    if n > len(pool):
        raise ValueError(f"asked for {n} keys but split {split!r} has {len(pool)}")
    return rng.sample(pool, n)


def near_key(rng: random.Random, key: str, split: str, taken: set[str]) -> str:
    """A key sharing one word with `key` (a near-duplicate distractor), not in `taken`."""
    a, b = key.split("-")
    adj, noun = key_words(split)
    options = [f"{a}-{x}" for x in noun] + [f"{x}-{b}" for x in adj]
    options = [o for o in options if o not in taken and o != key]
    return rng.choice(options)


def value(rng: random.Random, split: str, digits: int = 7) -> int:
    """A `digits`-digit number whose residue mod 3 is the split's index."""
    lo, hi = 10 ** (digits - 1), 10**digits - 3
    v = rng.randrange(lo, hi)
    return v - v % 3 + split_index(split)


def person_names(rng: random.Random, split: str, n: int) -> list[str]:
    """`n` distinct `First Last` names from the split's share."""
    first, last = part(FIRST_NAMES, split), part(LAST_NAMES, split)
    pool = [f"{f} {la}" for f in first for la in last]
    return rng.sample(pool, min(n, len(pool)))
