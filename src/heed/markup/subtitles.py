"""Subtitles translated a sentence at a time and split back over their cues by the model's alignment.

    translate_subtitles(translator, text, kind="srt", beam=4) -> the SRT with every cue translated
    translate_subtitle_file(translator, "film.en.srt", "film.fr.srt")

1. Cues are joined into units (`units`): a cue whose text ends without sentence-final punctuation
   joins the next one when that starts less than `max_gap` seconds after it ends (and not before:
   overlapping cues are never joined). A cue holding several sentences stays one unit.
2. Each unit's text is translated as one sentence (Translator.translate, batched).
3. A unit of several cues is aligned with its translation (a forced pass, the model's recorded
   reading, as heed.markup.carry), and each cue boundary goes before the target unit linked to the
   first source word of the next cue: heed.markup.placement.place of a point at that cue's start,
   which scales the position from the source's where no word after it is linked (`split`).
   Boundaries fall between target words, or between characters when the translation has fewer
   words than the unit has cues (a model writing "2016-03-27" for three cues), and a cue does not
   start with punctuation that closes what comes before ("," or the "-" inside "2016-03", which
   argmax often gives to the next word). A boundary that would leave a cue empty or cross an
   earlier one takes the proportional position instead.
4. Each cue's text is wrapped at spaces to `width` characters a line, over at most `max_lines`
   lines when its words allow (`wrap`); numbers, timings and settings are kept (heed.markup.cues).
5. The tags inside a cue (`<i>`, `<b>`, `<font color>`, WebVTT's `<c.class>` and `<v Speaker>`:
   heed.markup.cues.Cue.tags) go around the words of its new text that the unit's alignment links
   to the words they wrapped (heed.markup.placement.place, on the links inside that cue and its
   piece), nested and closed as in the source; a tag around the whole cue wraps the whole new
   text, and a cue with tags is aligned even when it is a unit alone.

Every cue gets some text: a unit whose translation has fewer characters than cues is translated a
cue at a time, and a cue whose translation is still empty keeps its source text.
"""
from __future__ import annotations

import itertools
import textwrap
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heed.errors import DataError
from heed.markup import cues as formats
from heed.markup.carry import own_links, target_units
from heed.markup.cues import Cue, Cues, Kind, kind_of, read_cues, tagged
from heed.markup.placement import Span, Units, place, unit_ranges
from heed.plumbing.files import atomic_write_text, open_regular

if TYPE_CHECKING:
    from heed.api import Translation, Translator
    from heed.explain.align_methods import AlignOptions

MAX_GAP = 1.5  # seconds: a longer pause between two cues ends the sentence
WIDTH = 42  # characters a line: the common broadcast limit (Netflix, BBC: 37-42)
MAX_LINES = 2
_FINAL = ".!?…。！？؟"
_CLOSING = "\"'”’»)]}"


@dataclass(frozen=True)
class Layout:
    """How cues are joined and laid out: `max_gap` seconds, `width` characters a line, `max_lines`."""

    max_gap: float = MAX_GAP
    width: int = WIDTH
    max_lines: int = MAX_LINES


def ends_sentence(text: str) -> bool:
    """Whether a cue's text ends with sentence-final punctuation (closing quotes and brackets
    after it allowed)."""
    stripped = text.rstrip().rstrip(_CLOSING)
    return stripped.endswith(tuple(_FINAL))


def units(cues: Sequence[Cue], max_gap: float = MAX_GAP) -> list[list[int]]:
    """The cue indices of each unit translated as one sentence, in order (see the module doc). A
    cue without text is a unit of its own, left untranslated."""
    groups: list[list[int]] = []
    for k, cue in enumerate(cues):
        if groups and cue.text and _joins(cues[groups[-1][-1]], cue, max_gap):
            groups[-1].append(k)
        else:
            groups.append([k])
    return groups


def _joins(before: Cue, after: Cue, max_gap: float) -> bool:
    gap = after.start - before.end
    return bool(before.text) and not ends_sentence(before.text) and 0 <= gap < max_gap


def split(cue_texts: Sequence[str], translation: str, links: Sequence[tuple[int, int]],
          units: Units = "words") -> list[str] | None:
    """`translation` of the cue texts joined by spaces, cut into one non-empty piece per cue, in
    order (see the module doc). `links`: (source word, target unit) pairs of that sentence and
    translation, units as `units` says. None when the translation has fewer characters than cues."""
    cuts = boundaries(cue_texts, translation, links, units)
    if cuts is None:
        return None
    edges = [0, *cuts, len(translation)]
    return [translation[a:b].strip() for a, b in itertools.pairwise(edges)]


def boundaries(cue_texts: Sequence[str], translation: str, links: Sequence[tuple[int, int]],
               units: Units = "words") -> list[int] | None:
    """The target character offset where each cue after the first starts (len(cue_texts) - 1 of
    them, increasing, each leaving every cue some text); None when that cannot be."""
    count = len(cue_texts)
    if count == 1:
        return [] if translation.strip() else None
    pieces = words = unit_ranges(translation, "words")
    if len(pieces) < count:  # too few words: cut between characters
        pieces = unit_ranges(translation, "chars")
        if len(pieces) < count:
            return None
    starts_src, at = [], 0
    for text in cue_texts:
        starts_src.append(at)
        at += len(text) + 1
    source = " ".join(cue_texts)
    points = [Span(s, s, point=True) for s in starts_src[1:]]
    linked = [a for a, _ in place(source, points, translation, links, units)]
    piece_starts = [a for a, _ in pieces]
    cuts: list[int] = []
    previous = 0
    for k, (position, src_at) in enumerate(zip(linked, starts_src[1:])):
        last = len(pieces) - (count - 1 - k)  # leave a piece for each cue after this one
        # before the target piece that holds the linked unit (the word it is in)
        chosen = max((p for p in range(1, len(pieces)) if piece_starts[p] <= position), default=0)
        if not previous < chosen <= last:
            scaled = len(translation) * src_at / max(len(source), 1)
            chosen = min(range(1, len(pieces)), key=lambda p: (abs(piece_starts[p] - scaled), p))
            chosen = min(max(chosen, previous + 1), last)
        while chosen < last and _leans_left(translation[slice(*pieces[chosen])], pieces is not words):
            chosen += 1
        cuts.append(chosen)
        previous = chosen
    return [piece_starts[p] for p in cuts]


def _leans_left(piece: str, inside_word: bool) -> bool:
    """Whether a cue must not start with `piece`: punctuation that closes or separates what comes
    before it (",", ".", ")"; inside a word any punctuation, the "-" of "2016-03"), which argmax
    often gives to the word after it. A dash or an opening quote or bracket may start a cue."""
    categories = {unicodedata.category(c) for c in piece}
    if not piece or not all(c.startswith("P") for c in categories):
        return False
    return inside_word or not categories & {"Pd", "Ps", "Pi"}


def wrap(text: str, width: int = WIDTH, max_lines: int = MAX_LINES) -> str:
    """`text` broken at spaces into lines of at most `width` characters ("\\n" between them), as
    few lines as that allows and as even as they can be (a subtitle's two lines balanced rather
    than a full one over a short one). A text that needs more than `max_lines` lines gets them
    (nothing is cut); a word longer than `width` stands on a line of its own."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    lines = textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]
    if len(lines) == 1:
        return lines[0]
    narrowest = width
    for narrower in range(width - 1, 0, -1):  # the narrowest width that needs no more lines
        if len(textwrap.wrap(text, narrower, break_long_words=False, break_on_hyphens=False)) > len(lines):
            break
        narrowest = narrower
    if len(lines) > max_lines:
        narrowest = width  # beyond the limit, full lines: as few extra lines as can be
    return "\n".join(textwrap.wrap(text, narrowest, break_long_words=False, break_on_hyphens=False))


def carry_cues(translator: Translator, subs: Cues, groups: Sequence[Sequence[int]], outputs: Sequence[str], *,
               options: AlignOptions | None = None, batch_size: int = 64,
               translations: Sequence[Translation | None] | None = None) -> list[str | None]:
    """Each cue's piece of its unit's translation (`outputs[g]` for unit `groups[g]`), unwrapped;
    None for a cue whose unit cannot be split (a translation with fewer characters than cues). The
    units of several cues are aligned in one batched forced pass (see the module doc), except
    those whose `translations[g]` is the model's own translation of the unit, when the reading
    is the attention the search reports: their links are read off the search's own attention,
    which is that pass's attention (`own_links`)."""
    return [piece for piece, _ in carry_cue_tags(translator, subs, groups, outputs, options=options,
                                                 batch_size=batch_size, translations=translations)]


def carry_cue_tags(translator: Translator, subs: Cues, groups: Sequence[Sequence[int]], outputs: Sequence[str], *,
                   options: AlignOptions | None = None, batch_size: int = 64,
                   translations: Sequence[Translation | None] | None = None
                   ) -> list[tuple[str | None, list[tuple[int, int]]]]:
    """`carry_cues`' pieces, each with the target range of each of its cue's tags in the piece
    with its whitespace collapsed (" ".join(piece.split()); heed.markup.placement.place's ranges,
    nested and not crossing; [] for a cue without tags or a None piece)."""
    if len(groups) != len(outputs):
        raise ValueError(f"{len(groups)} units but {len(outputs)} translations")
    units_of = target_units(translator)
    if options is None:
        options, _ = translator.default_reading(units_of)
    cues = subs.cues
    aligned = [g for g, group in enumerate(groups) if outputs[g].strip()
               and (len(group) > 1 or any(_placed_by_links(cues[k]) for k in group))]
    links: dict[int, list[tuple[int, int]]] = {}
    if translations is not None:
        mine = [(g, t) for g in aligned if (t := translations[g]) is not None and t.text == outputs[g]]
        found = own_links(translator, [t for _, t in mine], options)
        links.update({g: f for (g, _), f in zip(mine, found) if f is not None})
    forced = [g for g in aligned if g not in links]
    if forced:
        sources = [" ".join(cues[k].text for k in groups[g]) for g in forced]
        done = translator.align(sources, [outputs[g] for g in forced], options=options, batch_size=batch_size)
        links.update({g: list(a.links) for g, a in zip(forced, done)})
    out: list[tuple[str | None, list[tuple[int, int]]]] = [(None, []) for _ in cues]
    for g, group in enumerate(groups):
        texts = [cues[k].text for k in group]
        unit_links = links.get(g, [])
        cuts = boundaries(texts, outputs[g], unit_links, options.tgt_units)
        if cuts is None:
            continue
        edges = [0, *cuts, len(outputs[g])]
        targets = unit_ranges(outputs[g], options.tgt_units)
        first_word = 0
        for k, (a, b) in zip(group, itertools.pairwise(edges)):
            piece = outputs[g][a:b].strip()
            words = len(cues[k].text.split())
            first_unit = sum(1 for x, _ in targets if x < a)
            units_in = sum(1 for x, _ in targets if a <= x < b)
            inside = [(i - first_word, j - first_unit) for i, j in unit_links
                      if first_word <= i < first_word + words and first_unit <= j < first_unit + units_in]
            out[k] = (piece, place_tags(cues[k], " ".join(piece.split()), inside, options.tgt_units))
            first_word += words
    return out


def _whole(cue: Cue, span: Span) -> bool:
    return not span.point and span.start == 0 and span.end == len(cue.text) > 0


def _placed_by_links(cue: Cue) -> bool:
    """Whether a cue has a tag that the alignment places (one not around its whole text)."""
    return any(not _whole(cue, tag.span) for tag in cue.tags)


def place_tags(cue: Cue, text: str, links: Sequence[tuple[int, int]], units: Units = "words") -> list[tuple[int, int]]:
    """The range in `text`, the cue's new text, of each of its tags (heed.markup.placement.place of
    the cue's spans through `links`, (cue word, unit of `text`) pairs); a tag around the whole cue
    around the whole new text."""
    if not cue.tags:
        return []
    spans = [tag.span for tag in cue.tags]
    ranges = place(cue.text, spans, text, links, units) if _placed_by_links(cue) else [(0, 0)] * len(spans)
    return [(0, len(text)) if _whole(cue, span) else r for span, r in zip(spans, ranges)]


def cue_text(cue: Cue, text: str, ranges: Sequence[tuple[int, int]], kind: Kind, layout: Layout) -> str:
    """A cue's new text (whitespace collapsed, as `ranges` count it), wrapped (`wrap`: spaces become
    line breaks, so the ranges still hold) with its tags written around their ranges."""
    wrapped = wrap(text, layout.width, layout.max_lines)
    assert len(wrapped) == len(text), "wrap only turns spaces into line breaks"
    return tagged(wrapped, cue.tags, ranges, kind)


def translate_cues(translator: Translator, subs: Cues, *, layout: Layout = Layout(),
                   options: AlignOptions | None = None, **decode: Any) -> str:
    """`subs` with every cue's text translated (see the module doc), rendered in its own format."""
    groups = units(subs.cues, layout.max_gap)
    spoken = [g for g, group in enumerate(groups) if subs.cues[group[0]].text]
    sentences = [" ".join(subs.cues[k].text for k in groups[g]) for g in spoken]
    translated = translator.translate(sentences, **decode) if sentences else []
    outputs = [""] * len(groups)
    own: list[Translation | None] = [None] * len(groups)
    for g, translation in zip(spoken, translated):
        outputs[g], own[g] = translation.text, translation
    carried = carry_cue_tags(translator, subs, groups, outputs, options=options, translations=own)
    lone = [k for k, (text, _) in enumerate(carried) if text is None and subs.cues[k].text]
    if lone:  # a unit whose translation has fewer characters than cues: each of its cues alone
        units_of = target_units(translator)
        for k, out in zip(lone, translator.translate([subs.cues[k].text for k in lone], **decode)):
            alone = " ".join((out.text.strip() or subs.cues[k].text).split())
            carried[k] = (alone, place_tags(subs.cues[k], alone, [], units_of))  # the tags by the diagonal
    final: list[str | None] = []
    for cue, (text, ranges) in zip(subs.cues, carried):
        if not cue.text:
            final.append(None)  # a cue without text stays as it was
            continue
        plain = " ".join((text or cue.text).split())
        final.append(cue_text(cue, plain, ranges if text is not None else place_tags(cue, plain, [], "words"),
                              subs.kind, layout))
    return subs.render(final, escaped=True)


def translate_subtitles(translator: Translator, text: str, kind: Kind = "srt", *, layout: Layout = Layout(),
                        options: AlignOptions | None = None, path: str | Path | None = None, **decode: Any) -> str:
    """`text`, a whole SRT or WebVTT file, with every cue translated and the cues' count, numbers
    and timings kept; `decode`: Translator.translate's options (beam=, decode=, ...); `path` only
    names the file in errors (heed.errors.DataError, one line)."""
    return translate_cues(translator, read_cues(text, kind, path=path), layout=layout, options=options, **decode)


def translate_subtitle_file(translator: Translator, source: str | Path, target: str | Path, *,
                            kind: Kind | None = None, layout: Layout = Layout(),
                            options: AlignOptions | None = None, **decode: Any) -> None:
    """Translate the subtitle file `source` into `target` (same format; `kind` from `source`'s
    suffix unless given). `target` is written whole or not at all: a bad input writes nothing."""
    kind = kind or kind_of(source)
    try:
        with open_regular(source) as f:
            data = f.read()
    except OSError as e:
        raise DataError(f"cannot read the subtitles: {e.strerror or e}", path=source) from None
    out = translate_subtitles(translator, formats.decode(data, source), kind, layout=layout, options=options,
                              path=source, **decode)
    atomic_write_text(target, out)
