"""Pharaoh alignment files: one sentence pair a line, links `i-j` separated by spaces, `i` the
0-based source position and `j` the 0-based target position (source first), as the aligners write
them (GIZA++ symmetrised output, fast_align, eflomal). Gold standards also mark links that
annotators judged only *possible*; accepted spellings (Sure S is always a subset of Possible P):

    i-j     sure
    i-j-S   sure      (explicit)
    i-j-P   possible
    i?j     possible
    ipj     possible

The 1-based "LINE SRC TGT S|P" format of the 2003 NAACL shared task is not read here. Plain
Python: the corpus readers (a task's gold, data.dev.align) and heed.explain read them alike.

Bounds, so that a few hostile bytes cannot cost gigabytes: a line is at most MAX_LINE_CHARS
characters (read no further), a position at most MAX_POSITION_DIGITS digits, and where the pair a
line aligns is known (`read_gold_for`), it has at most one link per (source word, target unit)
pair, counted before the links are parsed."""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from heed.errors import DataError
from heed.plumbing.files import open_regular

Link = tuple[int, int]  # (src_i, tgt_j), 0-based

# One link token: `i-j`, `i-j-S`, `i-j-P`, `i?j` or `ipj`.
_LINK = re.compile(r"(\d+)(?:-(\d+)(?:-([SPsp]))?|[?p](\d+))")
_TOKEN = re.compile(r"\S+")
MAX_LINE_CHARS = 1 << 20  # 1M characters: some 100,000 links, far more than any sentence pair's
MAX_POSITION_DIGITS = 9  # a word position below a billion; Python refuses to read an int past 4,300 digits
COUNTED_LINKS = 4096  # a line of more links than this and than its pair has is refused unparsed
SHOWN_CHARS = 40  # the most of a malformed token a message repeats


def to_pharaoh(pairs: Iterable[Link]) -> str:
    """`[(0, 0), (1, 2)]` -> `"0-0 1-2"`. Sequences keep their order; sets are sorted."""
    if isinstance(pairs, (set, frozenset)):
        pairs = sorted(pairs)
    out = []
    for i, j in pairs:
        if int(i) != i or int(j) != j or i < 0 or j < 0:
            raise ValueError(f"alignment link ({i}, {j}) must be two non-negative integers")
        out.append(f"{int(i)}-{int(j)}")
    return " ".join(out)


def _parse_links(line: str, path: str | Path | None, line_no: int | None) -> tuple[set[Link], set[Link]]:
    """(sure, possible) links of one Pharaoh line; possible includes sure."""
    sure: set[Link] = set()
    possible: set[Link] = set()
    for token in line.split():
        m = _LINK.fullmatch(token)
        if m is None:
            shown = repr(token) if len(token) <= SHOWN_CHARS else \
                f"{token[:SHOWN_CHARS]!r}... ({len(token):,} characters)"
            raise DataError(
                f"malformed alignment link {shown}: expected 'i-j' (sure), 'i?j' or 'ipj' "
                "(possible), or 'i-j-S' / 'i-j-P', with 0-based positions",
                path=path,
                line=line_no,
            )
        src, tgt_dash, kind, tgt_possible = m.groups()
        if max(len(src), len(tgt_dash or tgt_possible)) > MAX_POSITION_DIGITS:
            raise DataError(f"alignment position of {max(len(src), len(tgt_dash or tgt_possible)):,} digits in link "
                            f"{token[:SHOWN_CHARS]!r}{'...' if len(token) > SHOWN_CHARS else ''}; positions are "
                            "0-based word numbers", path=path, line=line_no)
        if tgt_possible is not None:
            possible.add((int(src), int(tgt_possible)))
            continue
        link = (int(src), int(tgt_dash))
        possible.add(link)
        if kind is None or kind in "Ss":
            sure.add(link)
    return sure, possible


def gold_pharaoh(sure: Iterable[Link], possible: Iterable[Link]) -> str:
    """One gold line: sure links `i-j`, possible-only links `i?j`, in source-then-target order."""
    sure_set = set(sure)
    links = sorted(sure_set | set(possible))
    return " ".join(f"{i}-{j}" if (i, j) in sure_set else f"{i}?{j}" for i, j in links)


def parse_pharaoh(line: str, *, path: str | Path | None = None, line_no: int | None = None) -> set[Link]:
    """All links of one Pharaoh line as `{(src_i, tgt_j), ...}`, sure and possible alike.

    `path` and `line_no` (1-based) only name the place in a `DataError` for a malformed token.
    Use `parse_gold_pharaoh` to keep sure and possible links apart.
    """
    return _parse_links(line, path, line_no)[1]


def parse_gold_pharaoh(
    line: str, *, path: str | Path | None = None, line_no: int | None = None
) -> tuple[set[Link], set[Link]]:
    """`(sure, possible)` links of one gold Pharaoh line; `possible` includes every sure link."""
    return _parse_links(line, path, line_no)


def read_text_lines(path: str | Path) -> list[str]:
    """The lines of a Pharaoh file; a DataError naming the line for one over MAX_LINE_CHARS (read
    no further than that)."""
    lines: list[str] = []
    try:
        with open_regular(path, "r", encoding="utf-8") as f:
            while line := f.readline(MAX_LINE_CHARS + 1):
                if len(line) > MAX_LINE_CHARS and not (len(line) == MAX_LINE_CHARS + 1 and line.endswith("\n")):
                    raise DataError(f"a line of more than {MAX_LINE_CHARS:,} characters; an alignment line has a few "
                                    "links a word", path=path, line=len(lines) + 1)
                lines.append(line.rstrip("\r\n"))
        return lines
    except OSError as e:
        raise DataError(f"cannot read: {e.strerror or e}", path=path) from None
    except UnicodeDecodeError as e:
        raise DataError(f"not UTF-8 text ({e.reason} at byte {e.start})", path=path) from None


def _count_tokens(line: str, most: int) -> int:
    """The whitespace-separated tokens of `line`, counted up to `most` + 1 (no list of them made)."""
    found = 0
    for found, _ in enumerate(_TOKEN.finditer(line), 1):
        if found > most:
            break
    return found


def read_alignments(path: str | Path) -> list[set[Link]]:
    """One set of links per line of a Pharaoh file (an empty line is a sentence with no links)."""
    return [parse_pharaoh(line, path=path, line_no=n) for n, line in enumerate(read_text_lines(path), 1)]


def read_gold_alignments(path: str | Path) -> tuple[list[set[Link]], list[set[Link]]]:
    """`(sure, possible)`, one set per line each, from a gold Pharaoh file; possible includes sure."""
    sure, possible = [], []
    for n, line in enumerate(read_text_lines(path), 1):
        s, p = parse_gold_pharaoh(line, path=path, line_no=n)
        sure.append(s)
        possible.append(p)
    return sure, possible


def read_gold_for(path: str | Path, sizes: Sequence[tuple[int, int] | None], *, units: str = "words",
                  sides: str = "the source and target", hint: str = "") -> tuple[list[set[Link]], list[set[Link]]]:
    """(sure, possible) gold links of a file with one line per sentence pair, checked against the
    pairs' sizes `sizes[k] = (source words, target words or characters)` (None: a line counted but
    not checked, a pair the caller does not use): a DataError naming the file (and line) for a
    count that differs or a link outside its pair. Empty lines past the last sentence are ignored.
    `units`: "words" or "chars", what target positions count; `hint` ends the message for a link
    outside its pair. A line with more links than its pair has (source, target) pairs is refused
    before its links are parsed."""
    unit = "words" if units == "words" else "characters"
    lines = read_text_lines(path)
    sure, possible = [], []
    for number, line in enumerate(lines, 1):
        size = sizes[number - 1] if number <= len(sizes) else None  # a line too many: counted below
        if size is not None:
            # Counted before parsing only where the line is far past its pair: a short line with a
            # link outside the pair is told so by the parser, more usefully than by a count.
            most = size[0] * size[1]
            count = _count_tokens(line, max(most, COUNTED_LINKS))
            if count > max(most, COUNTED_LINKS):
                raise DataError(f"more than {most:,} links, but the sentence pair has {size[0]} source words and "
                                f"{size[1]} target {unit}: at most one link for each pair of them", path=path,
                                line=number)
        s, p = parse_gold_pharaoh(line, path=path, line_no=number)
        sure.append(s)
        possible.append(p)
    while len(sure) > len(sizes) and not possible[-1]:
        sure.pop()
        possible.pop()
    if len(sure) != len(sizes):
        raise DataError(f"{len(sure)} alignment lines but {sides} have {len(sizes)} sentences; "
                        "give one line per sentence (an empty line for none)", path=path)
    for number, (links, size) in enumerate(zip(possible, sizes), start=1):
        if size is None:
            continue
        n_src, n_tgt = size
        for i, j in sorted(links | sure[number - 1]):
            if i >= n_src or j >= n_tgt:
                raise DataError(f"link {i}-{j} is outside the sentence pair ({n_src} source words and {n_tgt} target "
                                f"{unit}; positions are 0-based whitespace words of the source and {unit} of the "
                                f"target{hint})",
                                path=path, line=number)
    return sure, possible
