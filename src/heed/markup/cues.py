"""Subtitle files (SRT, WebVTT) as cues to translate, and back, through the `srt` and `webvtt-py`
libraries (the `subtitles` extra): heed parses no subtitle format by hand.

    subs = read_cues(text, "srt", path="film.srt")   # -> Cues: cues [Cue(text, start, end, line)]
    subs.render(["first cue's new text", ...])        # -> the file with each cue's text replaced

Everything but a cue's text is kept: its number (SRT) or identifier and settings (WebVTT), its
timings, the WebVTT header, styles, regions and comments, a byte order mark and CRLF line ends.
A cue's `text` is what is translated: its lines joined by a space, tags (`<i>`, `<v Anna>`,
`{\\an8}`) left out and WebVTT's character references (`&amp;`) read. Tags inside the text are not
carried into the translation (heed.markup.placement could place them: not done yet); a leading
position code or voice is written again before the new text, and a cue without text is kept as it
was. Overlapping cues are kept as they are. Malformed input is one DataError naming the file and line: not UTF-8, a timing line that
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

Kind = Literal["srt", "vtt"]
_TAG = re.compile(r"<[^>]*>|\{\\[^}]*\}")  # HTML-like tags and SSA override codes ({\an8})
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


@dataclass
class Cues:
    """A parsed subtitle file: its cues in file order and what `render` needs to write it back."""

    kind: Kind
    cues: list[Cue]
    parsed: Any  # list[srt.Subtitle] or webvtt.WebVTT
    bom: bool
    eol: str

    def render(self, texts: Sequence[str | None]) -> str:
        """The file with cue k's text replaced by `texts[k]` ("\\n" between its lines) after the
        cue's `lead`, or kept as it was where `texts[k]` is None; every number, identifier, timing
        and setting kept. The parsed cues are not changed: call it any number of times."""
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
                        lines = [_vtt_escape(line) for line in text.split("\n")]
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
    cues = [Cue(_plain(sub.content), _seconds(sub.start), _seconds(sub.end), lines[k] if k < len(lines) else 0,
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
    cues = [Cue(_plain(html.unescape(caption.text)), _vtt_seconds(caption.start), _vtt_seconds(caption.end), line,
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


def _plain(content: str) -> str:
    """A cue's text as one line to translate: tags left out, whitespace collapsed."""
    return _SPACE.sub(" ", _TAG.sub("", content)).strip()


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
