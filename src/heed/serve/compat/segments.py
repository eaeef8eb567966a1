"""A client's text as the pieces a model translates: a model reads one sentence on one line, and
clients send paragraphs. The text is cut into lines (always: no sentence holds a line break) and,
unless told not to, each line into sentences after . ! ? and their CJK forms (not before a digit
or a lower-case letter, nor after a day's or a month's full stop: abbreviations and dates stay
whole); what lies between the pieces (line breaks, spaces, a blank line) is kept as it is and put
back around the translations.

    cut = segment("Hello. How are you?\\n\\nBye.")
    cut.pieces            # ["Hello.", "How are you?", "Bye."]
    cut.join(["Salut.", "Ça va ?", "Au revoir."])   # "Salut. Ça va ?\\n\\nAu revoir."
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_LINE_BREAK = re.compile(r"(\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029])")
# A sentence's last mark (and any closing quote or bracket), then the space before the next one:
# group 1 is what lies between the two sentences (none after a CJK full stop).
_CLOSING = r"[\"'\u201d\u2019)\]]?"
_SENTENCE_END = re.compile(rf"[.!?]{_CLOSING}(\s+)(?=\S)|[\u3002\uff01\uff1f]{_CLOSING}(\s*)(?=\S)")


@dataclass(frozen=True)
class Segmented:
    """A text cut into `parts`: at even positions what is kept as it is (separators, possibly
    empty), at odd positions the pieces to translate."""

    parts: tuple[str, ...]

    @property
    def pieces(self) -> list[str]:
        return list(self.parts[1::2])

    def join(self, translations: Sequence[str]) -> str:
        """The text with each piece replaced by its translation, in order."""
        assert len(translations) == len(self.parts) // 2, "one translation per piece"
        out = list(self.parts)
        out[1::2] = translations
        return "".join(out)


def segment(text: str, *, sentences: bool = True) -> Segmented:
    """`text` cut into lines, and lines into sentences when `sentences`; leading and trailing
    spaces of each piece stay outside it."""
    parts: list[str] = [""]
    for k, chunk in enumerate(_LINE_BREAK.split(text)):
        if k % 2:  # a line break
            parts[-1] += chunk
            continue
        pieces, separators = _sentences(chunk) if sentences else ([chunk], [])
        for j, piece in enumerate(pieces):
            stripped = piece.strip()
            if stripped:
                lead = piece[:len(piece) - len(piece.lstrip())]
                trail = piece[len(piece.rstrip()):]
                parts[-1] += lead
                parts += [stripped, trail]
            else:
                parts[-1] += piece
            if j < len(separators):
                parts[-1] += separators[j]
    return Segmented(tuple(parts))


def _ends(line: str, match: re.Match[str]) -> bool:
    """Whether a Latin mark ends a sentence: not before a digit or a lower-case letter ("déc. 1927",
    "etc. and"), and a full stop not after a number of one or two digits ("9. Januar", "28. August":
    German ordinals; "1993. 9. 11.": a Korean date). A year may end a sentence."""
    if match.group(1) is None:  # a CJK mark
        return True
    following = line[match.end(1):match.end(1) + 1]
    if following.isdigit() or following.islower():
        return False
    if line[match.start()] == ".":
        before = line[:match.start()].rsplit(None, 1)
        if before and before[-1].isdigit() and len(before[-1]) <= 2:
            return False
    return True


def _sentences(line: str) -> tuple[list[str], list[str]]:
    """A line's sentences and the spaces between them (one fewer)."""
    pieces, separators, start = [], [], 0
    for end in _SENTENCE_END.finditer(line):
        if not _ends(line, end):
            continue
        space = 1 if end.group(1) is not None else 2
        pieces.append(line[start:end.start(space)])
        separators.append(end.group(space))
        start = end.end(space)
    pieces.append(line[start:])
    return pieces, separators
