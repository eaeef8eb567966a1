"""Subtitle files (SRT, WebVTT) as cues to translate, and back, through the `srt` and `webvtt-py`
libraries (the `subtitles` extra): heed parses no subtitle format by hand.

    subs = read_cues(text, "srt", path="film.srt")   # -> Cues: cues [Cue(text, start, end, line)]
    subs.render(["first cue's new text", ...])        # -> the file with each cue's text replaced

Everything but a cue's text is kept: its number (SRT) or identifier and settings (WebVTT), its
timings, the WebVTT header, styles, regions and comments, a byte order mark and CRLF line ends.
A cue's `text` is what is translated: its lines joined by a space, tags (`<i>`, `<v Anna>`,
`{\\an8}`) left out and WebVTT's character references (`&amp;`) read. The tags inside it are the cue's
`tags` (`cue_tags`): each a Span of the text and the tag as written (`<i>`, `<font color="red">`,
`<c.yellow>`, `<v Bob>`, an SSA code or a WebVTT timestamp as a point), placed on the translation
by the alignment as heed.markup.placement places HTML's (heed.markup.subtitles) and written back
by `tagged`, nested and closed; a leading position code or voice is written again before the new
text, and a cue without text is kept as it was. Overlapping cues are kept as they are. Malformed input is one DataError naming the file and line: not UTF-8, a timing line that
does not parse or ends before it starts, a WebVTT file without its `WEBVTT` line, no cue at all.
"""
from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from heed.errors import DataError, install_hint
from heed.markup.placement import Span

Kind = Literal["srt", "vtt"]
_SPACE = re.compile(r"\s+")
_VTT_TIMING = re.compile(r"^\s*(?:\d+:)?\d{1,2}:\d{1,2}\.\d{1,3}\s*-->\s*(?:\d+:)?\d{1,2}:\d{1,2}\.\d{1,3}(?:\s|$)")
_LOOKS_TIMED = re.compile(r"\d+:\d+[:,.]\d+")  # a line that tries to be a timing line
_VTT_BLOCKS = ("NOTE", "STYLE", "REGION")
_SRT_LEAD = re.compile(r"(?:\{\\[^}]*\}\s*)+")  # {\an8}: where the cue stands
_VTT_LEAD = re.compile(r"<v(?:\.[^\s>]+)*\s+[^>]+>")  # <v Anna>: who speaks


@dataclass(frozen=True)
class Cue:
    """One cue: `text` to translate (one line, tags left out; "" for a cue without text), its start
    and end in seconds, the 1-based line of its timing line in the file (for messages), and the
    tags at its start that apply to the whole cue and are written again before its new text
    (`lead`: SRT's position codes such as `{\\an8}`, WebVTT's voice `<v Anna>`)."""

    text: str
    start: float
    end: float
    line: int
    lead: str = ""
    tags: tuple[Tag, ...] = ()


@dataclass(frozen=True)
class Tag:
    """An inline tag of a cue's text: the Span of `Cue.text` it applies to (parents first, as
    heed.markup.placement wants), its start as written (`<i>`, `<font color="red">`, `<c.yellow>`; a
    point's whole text: `{\\i1}`, `<00:00:01.500>`) and its end as written or, where the cue left it
    open, as its end is implied (`</c>`; "" for a point)."""

    span: Span
    start: str
    end: str


@dataclass
class Cues:
    """A parsed subtitle file: its cues in file order and what `render` needs to write it back."""

    kind: Kind
    cues: list[Cue]
    parsed: Any  # list[srt.Subtitle] or webvtt.WebVTT
    bom: bool
    eol: str

    def render(self, texts: Sequence[str | None], *, escaped: bool = False) -> str:
        """The file with cue k's text replaced by `texts[k]` ("\\n" between its lines) after the
        cue's `lead`, or kept as it was where `texts[k]` is None; every number, identifier, timing
        and setting kept. `escaped`: the texts are written as they are (`tagged`'s, its tags and
        WebVTT's character references in place), else WebVTT's &, < and > are escaped. The parsed
        cues are not changed: call it any number of times."""
        if len(texts) != len(self.cues):
            raise ValueError(f"{len(self.cues)} cues but {len(texts)} texts")
        if self.kind == "srt":
            import srt

            subs = [srt.Subtitle(s.index, s.start, s.end, s.content if text is None else cue.lead + text, s.proprietary)
                    for s, cue, text in zip(self.parsed, self.cues, texts)]
            out = srt.compose(subs, reindex=False, strict=False)
        else:
            captions = self.parsed.captions
            kept = [caption.lines for caption in captions]
            try:
                for caption, cue, text in zip(captions, self.cues, texts):
                    if text is not None:
                        lines = [line if escaped else _vtt_escape(line) for line in text.split("\n")]
                        caption.lines = [cue.lead + lines[0], *lines[1:]]
                out = self.parsed.content
            finally:
                for caption, lines in zip(captions, kept):
                    caption.lines = lines
        out = out.replace("\r\n", "\n")
        if self.eol != "\n":
            out = out.replace("\n", self.eol)
        return ("\ufeff" if self.bom else "") + out


def decode(data: bytes, path: str | Path | None = None) -> str:
    """A subtitle file's bytes -> text: strict UTF-8 (a byte order mark allowed); anything else
    is a DataError naming the line of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataError(f"invalid UTF-8 (byte {data[e.start]:#04x} at column {column}); re-encode the file as UTF-8",
                        path=path, line=line) from None


def kind_of(path: str | Path) -> Kind:
    """The format a subtitle file's name says: .srt or .vtt."""
    suffix = Path(path).suffix.lower()
    if suffix not in (".srt", ".vtt"):
        raise DataError(f"cannot tell the subtitle format from the name {Path(path).name!r}; "
                        "name it .srt or .vtt, or say the format", path=path)
    return "srt" if suffix == ".srt" else "vtt"


def read_cues(text: str, kind: Kind, *, path: str | Path | None = None) -> Cues:
    """Parse `text`, a whole SRT or WebVTT file (see the module doc); `path` only names it in errors."""
    if kind not in ("srt", "vtt"):
        raise ValueError(f"kind must be 'srt' or 'vtt', not {kind!r}")
    bom = text.startswith("\ufeff")
    body = text[1:] if bom else text
    eol = "\r\n" if "\r\n" in body else "\n"
    body = body.replace("\r\n", "\n").replace("\r", "\n")
    if not body.strip():
        raise DataError("the file holds no cues", path=path, line=1)
    parse = _read_srt if kind == "srt" else _read_vtt
    parsed, cues = parse(body, path)
    if not cues:
        raise DataError("the file holds no cues", path=path, line=1)
    for cue in cues:
        if cue.end < cue.start:
            raise DataError("the cue ends before it starts", path=path, line=cue.line)
    return Cues(kind, cues, parsed, bom, eol)


def _library(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError:
        raise DataError(f"reading subtitles needs the '{name}' library: {install_hint('subtitles')}") from None


def _timing_lines(lines: Sequence[str]) -> list[int]:
    """The 1-based numbers of the lines holding a cue's arrow, in order: the k-th is cue k's."""
    return [k + 1 for k, line in enumerate(lines) if "-->" in line]


def _read_srt(body: str, path: str | Path | None) -> tuple[list[Any], list[Cue]]:
    srt = _library("srt")
    try:
        subs = list(srt.parse(body))
    except srt.SRTParseError as e:
        raise DataError(_srt_problem(body, e.expected_start, e.actual_start), path=path,
                        line=_srt_bad_line(body, e.expected_start, e.actual_start)) from None
    except (ValueError, srt.TimestampParseError) as e:
        raise DataError(f"a timing does not parse ({e})", path=path) from None
    lines = _timing_lines(body.split("\n"))
    cues = [_cue(sub.content, "srt", _seconds(sub.start), _seconds(sub.end), lines[k] if k < len(lines) else 0,
                 _lead(sub.content, _SRT_LEAD)) for k, sub in enumerate(subs)]
    return subs, cues


def _srt_bad_line(body: str, start: int, end: int) -> int:
    """The line in the text srt could not match (body[start:end]) that should have been a timing
    line: the first one not blank and not a bare cue number."""
    first = body.count("\n", 0, start) + 1
    for k, line in enumerate(body[start:end].split("\n")):
        if line.strip() and not line.strip().isdigit():
            return first + k
    return first


def _srt_problem(body: str, start: int, end: int) -> str:
    line = body.split("\n")[_srt_bad_line(body, start, end) - 1].strip()
    shown = line if len(line) <= 60 else line[:57] + "..."
    return (f"not a cue's timing line: {shown!r}; an SRT cue is its number, then "
            "'HH:MM:SS,mmm --> HH:MM:SS,mmm', then its text and an empty line")


def _read_vtt(body: str, path: str | Path | None) -> tuple[Any, list[Cue]]:
    webvtt = _library("webvtt")
    lines = body.split("\n")
    if not lines[0].startswith("WEBVTT"):
        raise DataError("not a WebVTT file: its first line must start with 'WEBVTT'", path=path, line=1)
    bad = _vtt_bad_line(lines)
    if bad is not None:
        shown = lines[bad - 1].strip()
        raise DataError(f"not a cue's timing line: {shown[:60]!r}; a WebVTT cue's timing line is "
                        "'HH:MM:SS.mmm --> HH:MM:SS.mmm'", path=path, line=bad)
    try:
        parsed = webvtt.WebVTT.from_string(body)
    except (webvtt.errors.MalformedFileError, webvtt.errors.MalformedCaptionError, ValueError) as e:
        raise DataError(f"not a WebVTT file webvtt-py can read ({e})", path=path) from None
    timed = _timing_lines(lines)
    if len(parsed.captions) != len(timed):
        raise DataError(f"{len(timed)} timing lines but {len(parsed.captions)} cues read; "
                        "leave an empty line before each cue", path=path)
    cues = [_cue(caption.raw_text, "vtt", _vtt_seconds(caption.start), _vtt_seconds(caption.end), line,
                 _lead(caption.raw_text, _VTT_LEAD)) for caption, line in zip(parsed.captions, timed)]
    return parsed, cues


def _vtt_bad_line(lines: Sequence[str]) -> int | None:
    """The first line that tries to be a cue's timing line and is not one (webvtt-py would drop
    its cue without a word): a line with an arrow whose timings do not parse, or the line of a
    block after the header that is no cue, note, style or region but holds what looks like a time."""
    blocks: list[list[int]] = [[]]
    for k, line in enumerate(lines):
        if line.strip():
            blocks[-1].append(k)
        elif blocks[-1]:
            blocks.append([])
    for block in blocks[1:]:
        if not block or lines[block[0]].startswith(_VTT_BLOCKS):
            continue
        arrows = [k for k in block if "-->" in lines[k]]
        for k in arrows:
            if not _VTT_TIMING.match(lines[k]):
                return k + 1
        if not arrows:
            timed = [k for k in block[:2] if _LOOKS_TIMED.search(lines[k])]
            return (timed[0] if timed else block[0]) + 1
    return None


def _lead(content: str, pattern: re.Pattern[str]) -> str:
    """The tags at the start of `content` that `pattern` keeps for the whole cue ("" for none)."""
    match = pattern.match(content.lstrip())
    return match.group(0).strip() if match else ""


def _cue(content: str, kind: Kind, start: float, end: float, line: int, lead: str) -> Cue:
    """A cue of `content` (its lines as written, `lead` at its start), its text and tags read."""
    body = content.lstrip()
    body = body[len(lead):] if lead and body.startswith(lead) else content
    text, tags = cue_tags(body, kind)
    return Cue(text, start, end, line, lead, tags)


def _tokens(content: str) -> list[tuple[bool, str]]:
    """`content` as (is a tag, its text) in order: a tag runs from "<" to the next ">" (WebVTT's
    cue-text tokenizer; SRT's HTML-like tags alike), an SSA code from "{\\" to the next "}"; an
    unterminated one is text."""
    out: list[tuple[bool, str]] = []
    at = 0
    text_from = 0
    while at < len(content):
        closer = ">" if content[at] == "<" else "}" if content.startswith("{\\", at) else None
        stop = content.find(closer, at + 1) if closer else -1
        if stop < 0:
            at += 1
            continue
        if text_from < at:
            out.append((False, content[text_from:at]))
        out.append((True, content[at:stop + 1]))
        at = text_from = stop + 1
    if text_from < len(content):
        out.append((False, content[text_from:]))
    return out


def _tag_name(tag: str) -> str:
    """"i" of <i> and </i>, "c" of <c.yellow>, "font" of <font color=red>; "" for a point (an SSA
    code, a WebVTT timestamp <00:01.000>, an empty <>)."""
    inner = tag[1:-1].lstrip("/").strip() if tag.startswith("<") else ""
    name = inner.split(None, 1)[0].split(".", 1)[0].lower() if inner else ""
    return "" if not name or name[0].isdigit() else name


def cue_tags(content: str, kind: Kind) -> tuple[str, tuple[Tag, ...]]:
    """A cue's content as (its text, its tags): the text is one line, whitespace collapsed and
    stripped, WebVTT's character references read; each start tag wraps the text up to its end tag
    (or to the end of the cue, where cues leave tags open), an end tag closing tags left open inside
    it; an end tag nothing opened is dropped, as players ignore it."""
    parts: list[str] = []
    length, spaced = 0, True
    spans: list[list[int]] = []  # [start, end, parent, point]
    starts: list[str] = []
    ends: list[str] = []
    stack: list[int] = []
    for is_tag, piece in _tokens(content):
        if not is_tag:
            text = html.unescape(piece) if kind == "vtt" else piece
            for k, word in enumerate(_SPACE.split(text)):
                if k and not spaced:
                    parts.append(" ")
                    length, spaced = length + 1, True
                if word:
                    parts.append(word)
                    length, spaced = length + len(word), False
            continue
        name = _tag_name(piece)
        if piece.startswith("</"):
            if name and any(starts[k] and _tag_name(starts[k]) == name for k in stack):
                while stack:
                    k = stack.pop()
                    spans[k][1] = length
                    if _tag_name(starts[k]) == name:
                        ends[k] = piece
                        break
            continue
        parent = stack[-1] if stack else -1
        spans.append([length, length, parent, 0 if name else 1])
        starts.append(piece)
        ends.append(f"</{name}>" if name else "")
        if name:
            stack.append(len(spans) - 1)
    for k in stack:
        spans[k][1] = length
    if parts and parts[-1] == " ":
        parts.pop()
        length -= 1
    tags = tuple(Tag(Span(min(a, length), min(b, length), parent, point=bool(point) or min(a, length) == min(b, length)),
                     start, end) for (a, b, parent, point), start, end in zip(spans, starts, ends))
    return "".join(parts), tags


def tagged(text: str, tags: Sequence[Tag], ranges: Sequence[tuple[int, int]], kind: Kind) -> str:
    """`text` (a cue's new text, "\\n" between its lines) with each of `tags` written around its
    range in `ranges` (heed.markup.placement.place's: nested, no siblings crossing), WebVTT's &, <
    and > escaped in the text. Well-formed: each start tag has its end tag inside its parent's."""
    escape = _vtt_escape if kind == "vtt" else (lambda t: t)
    children: dict[int, list[int]] = {}
    for k, tag in enumerate(tags):
        children.setdefault(tag.span.parent, []).append(k)

    def fill(parent: int, lo: int, hi: int) -> str:
        out, cursor = [], lo
        for k in sorted(children.get(parent, []), key=lambda k: (ranges[k][0], ranges[k][1] > ranges[k][0], k)):
            start, end = ranges[k]
            if start > cursor:
                out.append(escape(text[cursor:start]))
            if tags[k].end:
                out.append(tags[k].start + fill(k, start, end) + tags[k].end)
            else:
                out.append(tags[k].start)
            cursor = max(cursor, end)
        if hi > cursor:
            out.append(escape(text[cursor:hi]))
        return "".join(out)

    return fill(-1, 0, len(text))


def _seconds(value: timedelta) -> float:
    return value.total_seconds()


def _vtt_seconds(stamp: str) -> float:
    """"01:02:03.450" or "02:03.450" -> seconds."""
    seconds = 0.0
    for part in stamp.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds


def _vtt_escape(line: str) -> str:
    return line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
