"""Markup carried by alignment, on a gold by construction: dates whose source words each carry an
inline tag (<b>, <i>, <u>, ... one per word that writes part of the ISO date), projected onto the
reference translation (heed.markup.carry: a forced pass, the model's own reading) and onto the
model's own translation where it equals the reference. A tag is right when it wraps exactly the
output characters its word writes (the gold's sure links: the day's two digits, the month's, the
year's four).

    python bench/studies/markup_dates.py runs/demo [--n 1000] [--languages en fr de es ko]

Prints the share of tags placed exactly, the share of outputs that parse, and the time.
"""
from __future__ import annotations

import argparse
import time

from lxml import etree

import heed
from heed.data.dates import DATE_LANGUAGES, generate_dates_aligned
from heed.markup import carry_many, parse, target_units

TAGS = ("b", "i", "u", "em", "strong", "code", "span")


def tagged(src: str, sure: frozenset[tuple[int, int]]) -> tuple[str, list[tuple[str, tuple[int, int]]]]:
    """`src` with each word that writes output characters wrapped in its own tag, and the gold:
    (tag, (first output character, one past the last)) in source order."""
    words = src.split()
    positions: dict[int, list[int]] = {}
    for i, j in sure:
        positions.setdefault(i, []).append(j)
    out, gold = [], []
    for i, word in enumerate(words):
        if i in positions:
            tag = TAGS[len(gold) % len(TAGS)] if TAGS[len(gold) % len(TAGS)] != "code" else "mark"
            out.append(f"<{tag}>{word}</{tag}>")
            gold.append((tag, (min(positions[i]), max(positions[i]) + 1)))
        else:
            out.append(word)
    return " ".join(out), gold


def placed_tags(html: str) -> list[tuple[str, tuple[int, int]]]:
    """(tag, (start, end)) of each element of a one-paragraph fragment, offsets in its text."""
    root = etree.fromstring(f"<r>{html}</r>")
    found, at = [], 0

    def walk(element):
        nonlocal at
        start = at
        at += len(element.text or "")
        for child in element:
            walk(child)
            at += len(child.tail or "")
        if element.tag != "r":
            found.append((element.tag, start, at))

    walk(root)
    return [(tag, (s, e)) for tag, s, e in sorted(found, key=lambda f: f[1])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--languages", nargs="+", default=list(DATE_LANGUAGES))
    parser.add_argument("--seed", type=int, default=20261128)
    args = parser.parse_args()
    translator = heed.load(args.model, device="cpu")
    splits, golds = generate_dates_aligned(n_train=0, n_dev=0, n_test=args.n, seed=args.seed,
                                           languages=tuple(args.languages))
    sources, golds_by_tag = zip(*(tagged(p.src, g[0]) for p, g in zip(splits.test, golds.test)))
    references = [p.tgt for p in splits.test]
    started = time.perf_counter()
    projected = carry_many(translator, [parse(s, "html") for s in sources], [[r] for r in references])
    seconds = time.perf_counter() - started
    right = total = 0
    for out, gold in zip(projected, golds_by_tag):
        got = dict(placed_tags(out))
        right += sum(got.get(tag) == span for tag, span in gold)
        total += len(gold)
    print(f"{args.model}: {args.n} dates ({', '.join(args.languages)}), units {target_units(translator)}")
    print(f"  onto the reference: {right}/{total} tags exact = {100 * right / total:.2f}% ({seconds:.1f} s)")
    own = translator.translate([parse(s, "html").sentences[0] for s in sources])
    same = [k for k, t in enumerate(own) if t.text == references[k]]
    right = sum(dict(placed_tags(projected[k])).get(tag) == span for k in same for tag, span in golds_by_tag[k])
    total = sum(len(golds_by_tag[k]) for k in same)
    print(f"  own translations equal to the reference: {len(same)}/{args.n}; their tags exact "
          f"{right}/{total} = {100 * right / max(total, 1):.2f}%")


if __name__ == "__main__":
    main()
