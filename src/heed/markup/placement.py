"""Where a source sentence's inline elements go in its translation: each element's source words,
through the word alignment, to the target characters they were translated as.

    source  "The <b>red</b> car"    spans [(4, 7)]  words The red car
    links   red-rouge, car-voiture, The-La   (source word, target unit)
    target  "La voiture rouge"      -> [(11, 16)]: "La voiture <b>rouge</b>"

An element that wraps text wraps the hull of the target units its source words are linked to (not
across a unit linked only to words outside it, and less punctuation at its edges that its own
source text lacks there), grown over the unlinked units that touch it inside the same target word
(characters a null threshold left out, or linked only as a stray: apart from the rest of their
word's units); an
element of no width (`<br/>`, an element kept verbatim) goes before the first target unit of the
source word that follows it. Where the alignment links none of an element's words, its place is
scaled from the source's positions (the sentence's diagonal). Then the tree is made whole again:
a child lies inside its parent, and siblings do not cross (a later one starts where an earlier one
ends), so every placement renders as well-formed markup.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

Units = Literal["words", "chars"]
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Span:
    """One inline element of a sentence: it wraps characters [start, end) of the sentence's plain
    text, or stands at `start` (`point`: a void element, a comment, or one kept verbatim).
    `parent`: the index of the enclosing span in the same list (-1: the sentence itself); a
    parent comes before its children (document order)."""

    start: int
    end: int
    parent: int = -1
    point: bool = False


def unit_ranges(text: str, units: Units) -> list[tuple[int, int]]:
    """The character range of each unit of `text`: its whitespace words, or its non-space characters."""
    if units == "words":
        return [m.span() for m in _WORD.finditer(text)]
    return [(k, k + 1) for k, c in enumerate(text) if not c.isspace()]


def place(src_text: str, spans: Sequence[Span], tgt_text: str, links: Sequence[tuple[int, int]],
          units: Units = "words") -> list[tuple[int, int]]:
    """The target character range [start, end) of each span (start == end: a point), nested as
    the spans are and with no two siblings crossing. `links`: (source word, target unit) pairs,
    words of `src_text` split at whitespace, units of `tgt_text` as `units` says."""
    src_words = unit_ranges(src_text, "words")
    tgt_units = unit_ranges(tgt_text, units)
    links_of = _Links(len(src_words), len(tgt_units), links)
    linked = links_of.linked
    scale = _Diagonal(len(src_text), len(tgt_text), tgt_text)
    raw = []
    for span in spans:
        if span.point or span.start == span.end:
            raw.append((p := _point(span.start, src_words, linked, tgt_units, scale, len(tgt_text)), p))
        else:
            start, end = _hull(span, src_words, links_of, tgt_units, tgt_text, scale)
            raw.append(_trim(src_text[span.start:span.end], tgt_text, start, end))
    return _nest(spans, raw, len(tgt_text))


class _Diagonal:
    """A source position scaled to the target's length, moved to the nearest start of a target
    word (`end=False`) or end of one (`end=True`)."""

    def __init__(self, src_len: int, tgt_len: int, tgt_text: str) -> None:
        self.ratio = tgt_len / src_len if src_len else 0.0
        words = unit_ranges(tgt_text, "words")
        self.starts = [a for a, _ in words] or [0]
        self.ends = [b for _, b in words] or [tgt_len]
        self.length = tgt_len

    def __call__(self, position: int, *, end: bool = False) -> int:
        at = position * self.ratio
        return min(self.ends if end else self.starts + [self.length], key=lambda b: (abs(b - at), b))


class _Links:
    """A sentence's links by source word (`linked`: its target units) and by target unit
    (`owners`: its source words); `free` is computed when a hull first asks."""

    def __init__(self, n_words: int, n_units: int, links: Sequence[tuple[int, int]]) -> None:
        self.linked: list[list[int]] = [[] for _ in range(n_words)]
        self.owners: list[set[int]] = [set() for _ in range(n_units)]
        for i, j in links:
            if 0 <= i < n_words and 0 <= j < n_units:
                self.linked[i].append(j)
                self.owners[j].add(i)

    @cached_property
    def free(self) -> list[bool]:
        """For each target unit, whether no word holds it but as a stray link: one outside the
        largest part of that word's own units (_parts), as a year's last digit linked to the day."""
        kept: list[set[int]] = [set(_largest(_parts(sorted(set(units)), {i}, self.owners))) if units else set()
                                for i, units in enumerate(self.linked)]
        return [all(j not in kept[i] for i in owned) for j, owned in enumerate(self.owners)]


def _hull(span: Span, src_words: list[tuple[int, int]], links: _Links, tgt_units: list[tuple[int, int]],
          tgt_text: str, scale: _Diagonal) -> tuple[int, int]:
    """The target range of a span's words: the hull of their linked units, split where a unit
    between them is linked to a word outside the span only (a separator argmax gave to a far
    word, or a word of another element), keeping the part with the most units; then grown over
    the free units (_Links.free) that touch it inside one target word, up to punctuation."""
    words = {i for i, (a, b) in enumerate(src_words) if a < span.end and b > span.start}
    targets = sorted({j for i in words for j in links.linked[i]})
    if not targets:
        start, end = scale(span.start), scale(span.end, end=True)
        return (start, end) if start < end else (start, start)
    best = _largest(_parts(targets, words, links.owners))
    first, last = best[0], best[-1]
    while first > 0 and _touches(first - 1, first, links, tgt_units, tgt_text):
        first -= 1
    while last + 1 < len(tgt_units) and _touches(last + 1, last, links, tgt_units, tgt_text):
        last += 1
    return tgt_units[first][0], tgt_units[last][1]


def _parts(targets: list[int], words: set[int], owners: list[set[int]]) -> list[list[int]]:
    """`targets` (sorted units) cut where a unit between two of them is linked, and only to words
    outside `words`."""
    parts, part = [], [targets[0]]
    for j in targets[1:]:
        if any(owners[g] and not owners[g] & words for g in range(part[-1] + 1, j)):
            parts.append(part)
            part = []
        part.append(j)
    parts.append(part)
    return parts


def _largest(parts: list[list[int]]) -> list[int]:
    """The first of the parts with the most units."""
    return max(parts, key=len)


def _touches(j: int, neighbour: int, links: _Links, tgt_units: list[tuple[int, int]], tgt_text: str) -> bool:
    """Whether unit `j` joins unit `neighbour` inside one target word (no space between:
    characters, never words), neither of them punctuation (a hull that ends on a separator is
    trimmed there, not grown past it), and is free."""
    (a, b), (c, d) = tgt_units[j], tgt_units[neighbour]
    return ((b == c or d == a) and b - a == 1 and d - c == 1 and not _punctuation(tgt_text[a])
            and not _punctuation(tgt_text[c]) and links.free[j])


def _punctuation(character: str) -> bool:
    return unicodedata.category(character).startswith("P")


def _trim(source: str, tgt_text: str, start: int, end: int) -> tuple[int, int]:
    """The hull without punctuation at its edges that the element's own source text does not
    have there: argmax gives a separator ("-" in 1991-09-02, a sentence's final ".") to one of
    its neighbours, and the element wraps its words, not their separators."""
    while end - start > 1 and _punctuation(tgt_text[end - 1]) and not source.endswith(tgt_text[end - 1]):
        end -= 1
    while end - start > 1 and _punctuation(tgt_text[start]) and not source.startswith(tgt_text[start]):
        start += 1
    return start, end


def _point(position: int, src_words: list[tuple[int, int]], linked: list[list[int]],
           tgt_units: list[tuple[int, int]], scale: _Diagonal, tgt_len: int) -> int:
    following = [i for i, (_, b) in enumerate(src_words) if b > position]
    if not following:
        return tgt_len  # after the last word: the end of the translation
    for i in following:
        if linked[i]:
            return min(tgt_units[j][0] for j in linked[i])
    return scale(position)


def _nest(spans: Sequence[Span], raw: list[tuple[int, int]], tgt_len: int) -> list[tuple[int, int]]:
    """Parents first: clip each span into its parent's place (a wrap clipped to nothing takes its
    parent's whole place), then keep siblings from crossing (_uncross)."""
    children: dict[int, list[int]] = {}
    for k, span in enumerate(spans):
        children.setdefault(span.parent, []).append(k)
    placed = list(raw)
    todo = [(-1, 0, tgt_len)]
    while todo:
        parent, lo, hi = todo.pop()
        siblings = children.get(parent, [])
        for k in siblings:
            start, end = (min(max(x, lo), hi) for x in raw[k])
            wrap = not (spans[k].point or spans[k].start == spans[k].end)
            if wrap and end <= start:
                start, end = lo, hi
            placed[k] = (start, max(start, end))
        _uncross(siblings, placed)
        todo.extend((k, *placed[k]) for k in siblings)
    return placed


def _uncross(siblings: list[int], placed: list[tuple[int, int]]) -> None:
    """In target order, a sibling that starts inside an earlier one starts where that one ends; a
    point inside a sibling moves to the nearer of its edges."""
    wraps = sorted((k for k in siblings if placed[k][0] < placed[k][1]), key=lambda k: (placed[k], k))
    end = -1
    for k in wraps:
        start, stop = placed[k]
        placed[k] = (min(max(start, end), stop), stop)
        end = max(end, stop)
    taken = [placed[k] for k in wraps if placed[k][0] < placed[k][1]]
    for k in siblings:
        start, stop = placed[k]
        if start == stop:
            for a, b in taken:
                if a < start < b:
                    start = a if start - a <= b - start else b
            placed[k] = (start, start)
