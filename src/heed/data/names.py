"""The generated "names" task: short English sentences about invented people -> French, where the
names must pass through unchanged. The test of copy attention (See et al. 2017): every name is
made of random syllables, and the test set's names are never seen in training, so a model with a
closed target vocabulary can only write <unk> for them, while a pointer-generator can copy them.

    "my name is Dabokune ."          -> "je m'appelle Dabokune ."
    "Tivo and Rasemu are friends ."  -> "Tivo et Rasemu sont amis ."

Meant for word tokenization (the names are single capitalized words; the template words are all
lower case, so a name never coincides with one). Train, dev and test draw their names from
disjoint pools; `NamesExample.names` lists the names of each pair, for scoring how many came
through (`copied_names`), and `NamesExample.gold` its gold word alignment, written by hand for each
template (sure links, and possible ones where an idiom has no word-for-word reading).
"""
from __future__ import annotations

import random
from typing import NamedTuple

from heed.data.corpus import Pair

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"

# (English, French, gold word alignment) with {a} and {b} for names. The alignment is Pharaoh over
# the template's words (a name is one word): i-j sure, i?j possible (idioms: "my name is" ~ "je m'appelle").
TEMPLATES: tuple[tuple[str, str, str], ...] = (
    ("my name is {a} .", "je m'appelle {a} .", "0?0 1?1 2?1 3-2 4-3"),
    ("{a} is here .", "{a} est ici .", "0-0 1-1 2-2 3-3"),
    ("where is {a} ?", "où est {a} ?", "0-0 1-1 2-2 3-3"),
    ("i saw {a} yesterday .", "j'ai vu {a} hier .", "0-0 1?0 1-1 2-2 3-3 4-4"),
    ("{a} is a doctor .", "{a} est médecin .", "0-0 1-1 2?2 3-2 4-3"),
    ("{a} likes the small cat .", "{a} aime le petit chat .", "0-0 1-1 2-2 3-3 4-4 5-5"),
    ("this is the house of {a} .", "c'est la maison de {a} .", "0-0 1-0 2-1 3-2 4-3 5-4 6-5"),
    ("{a} and {b} are friends .", "{a} et {b} sont amis .", "0-0 1-1 2-2 3-3 4-4 5-5"),
    ("{a} speaks with {b} .", "{a} parle avec {b} .", "0-0 1-1 2-2 3-3 4-4"),
    ("{a} lives in {b} .", "{a} habite à {b} .", "0-0 1-1 2-2 3-3 4-4"),
    ("tomorrow {a} will visit {b} .", "demain {a} rendra visite à {b} .", "0-0 1-1 2-2 3?2 2?3 3-3 3?4 4-5 5-6"),
    ("the teacher of {a} is {b} .", "le professeur de {a} est {b} .", "0-0 1-1 2-2 3-3 4-4 5-5 6-6"),
)


class NamesExample(NamedTuple):
    pair: Pair
    names: tuple[str, ...]  # the names the pair holds, in source order
    gold: str = ""  # the pair's gold word alignment, Pharaoh (its template's)


class NamesSplits(NamedTuple):
    train: list[NamesExample]
    dev: list[NamesExample]
    test: list[NamesExample]


def invent_name(rng: random.Random) -> str:
    """A capitalized word of 2 to 4 consonant-vowel syllables, e.g. "Dabokune"."""
    syllables = rng.randint(2, 4)
    return "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables)).capitalize()


def _name_pool(rng: random.Random, size: int, taken: set[str]) -> list[str]:
    pool: list[str] = []
    while len(pool) < size:
        name = invent_name(rng)
        if name not in taken:
            taken.add(name)
            pool.append(name)
    return pool


def _examples(n: int, pool: list[str], rng: random.Random) -> list[NamesExample]:
    out = []
    for _ in range(n):
        src, tgt, gold = rng.choice(TEMPLATES)
        a, b = rng.sample(pool, 2)
        names = (a, b) if "{b}" in src else (a,)
        out.append(NamesExample(Pair(src.format(a=a, b=b), tgt.format(a=a, b=b)), names, gold))
    return out


def generate_names(*, n_train: int, n_dev: int, n_test: int, seed: int = 0,
                   train_names: int = 500, heldout_names: int = 200) -> NamesSplits:
    """Sentence pairs over `train_names` invented names for training and `heldout_names` others for
    dev and for test each (three disjoint pools). Deterministic in `seed`."""
    if min(train_names, heldout_names) < 2:
        raise ValueError("each name pool needs at least 2 names (some templates name two people)")
    rng = random.Random(seed)
    taken: set[str] = set()
    pools = [_name_pool(rng, size, taken) for size in (train_names, heldout_names, heldout_names)]
    train, dev, test = (_examples(n, pool, rng) for n, pool in zip((n_train, n_dev, n_test), pools))
    return NamesSplits(train, dev, test)


def copied_names(examples: list[NamesExample], outputs: list[str]) -> tuple[int, int]:
    """(names that appear as a word of their example's output, names in all): a name counts as
    copied when the output holds it exactly, as many times as the source does."""
    if len(examples) != len(outputs):
        raise ValueError(f"{len(examples)} examples but {len(outputs)} outputs")
    copied = total = 0
    for example, output in zip(examples, outputs):
        words = output.split()
        for name in set(example.names):
            wanted = example.names.count(name)
            copied += min(words.count(name), wanted)
            total += wanted
    return copied, total
