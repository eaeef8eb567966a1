"""Parallel corpora: read sentence pairs from a TSV file or two aligned files, plain or gzipped.

Every reader streams (one line in memory at a time), decodes UTF-8 strictly and passes both sides
through `normalize`. Bad input raises `DataError` naming the file and 1-based line, never a bare
`UnicodeDecodeError` or `IndexError`.

A training corpus is a regular file (a symlink to one is fine): training reads it more than once
(its fingerprint for resume, then its pairs), which a pipe cannot give, and a device such as
`/dev/zero` never ends. A file a command reads once (`evaluate --src <(cmd)`, `align --tgt FIFO`)
may also be a pipe or a named pipe (`streams=True`), read as `cat` reads it.

Lines end at "\\n", "\\r\\n" or a lone "\\r" (old Mac files), as in Python's universal newlines and
in most editors, so line numbers in errors match what an editor shows and a CR-only file reads as
the many lines it holds rather than as one. A line is at most `MAX_LINE_BYTES` (1 MiB): anything
longer is not a sentence (a binary or an endless file), and reading stops there with an error, so
memory stays bounded whatever the file holds.

Control characters (C0, U+0000 to U+001F, except tab) are errors naming the file, line and
column, not stripped: a NUL or an escape in a corpus means a binary or a corrupt file, and
silently dropping it would hide that (and, in parallel files, could hide a shifted alignment).

Empty lines (nothing before the newline) at the very end of a file are ignored, since editors and
`echo >>` leave them; an empty line followed by more text is an error, because it usually means a
lost sentence and, in parallel files, a shifted alignment. A line of only spaces is not empty: it
is a sentence that normalizes to nothing, reported as an empty source or target.
"""
from __future__ import annotations

import gzip
import io
import os
import re
import stat
import unicodedata
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple, Protocol

from heed.errors import DataError
from heed.plumbing.files import file_kind, open_stream

PathLike = str | os.PathLike[str]

MAX_LINE_BYTES = 1 << 20  # 1 MiB
_CHUNK = 1 << 16
_LINE_END = re.compile(rb"\r\n|\r|\n")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f]")  # C0 controls but tab
_C0_NAMES = {0: "NUL", 0x1B: "ESC", 0x0B: "vertical tab", 0x0C: "form feed"}


class Pair(NamedTuple):
    """One source sentence and its translation, both normalized."""

    src: str
    tgt: str


# Zero-width characters are dropped rather than turned into spaces: U+2060 WORD JOINER and
# U+FEFF ZERO WIDTH NO-BREAK SPACE (a stray BOM) join, they do not separate, so a space would
# split a word in two. Visible no-break spaces (U+00A0, U+202F narrow, U+2007 figure, U+3000
# ideographic, ...) are whitespace to `str.split` and collapse to one ordinary space below.
ZERO_WIDTH = "\u200b\u2060\ufeff"
_DROP = dict.fromkeys(map(ord, ZERO_WIDTH), None)


def normalize(text: str) -> str:
    """Unicode NFC, no-break and other Unicode spaces -> " ", whitespace runs collapsed, stripped.

    >>> normalize("Va\\u202f!  ")
    'Va !'
    """
    text = unicodedata.normalize("NFC", text).translate(_DROP)
    return " ".join(text.split())


class ByteStream(Protocol):
    """What `physical_lines` reads: a binary file, gzip file or stdin's buffer."""

    def read1(self, size: int = ..., /) -> bytes: ...


def _open_binary(path: Path, *, streams: bool = False) -> io.BufferedIOBase:
    """Open a corpus file for reading bytes; `.gz` files are decompressed on the fly. Anything but
    a regular file is refused before opening (training reads a corpus twice, and a device such as
    /dev/zero never ends); with `streams`, a pipe or named pipe is read too (heed.plumbing.files.open_stream:
    a FIFO waits for its writer)."""
    try:
        mode = path.stat().st_mode  # follows symlinks: a link to a file is a file
    except FileNotFoundError:
        raise DataError("no such file", path=path) from None
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise DataError(f"cannot open: {getattr(e, 'strerror', None) or e}", path=path) from None
    if stat.S_ISDIR(mode):
        raise DataError("is a directory, expected a text file", path=path)
    if streams and stat.S_ISFIFO(mode):
        if path.suffix == ".gz":  # the gzip-bomb cap is a ratio of the file's size, which a pipe has not
            raise DataError("a gzipped pipe is not read (the bound on what a .gz may inflate to needs its size); "
                            "decompress it in the pipe instead, e.g. <(zcat FILE.gz)", path=path)
        try:
            stream = open_stream(path, devices=False)
        except OSError as e:
            raise DataError(f"cannot open: {e.strerror or e}", path=path) from None
        assert isinstance(stream, io.BufferedIOBase)  # opened "rb": a buffered reader, which has read1
        return stream
    if not stat.S_ISREG(mode):
        raise DataError(f"is {file_kind(mode)}, not a regular file; a corpus must be a file (save the data to one "
                        "first)",
                        path=path)
    try:
        if path.suffix == ".gz":
            return _CappedGzip(path, path.stat().st_size)
        return open(path, "rb")
    except OSError as e:
        raise DataError(f"cannot open: {e.strerror or e}", path=path) from None


MAX_GZIP_RATIO = 200  # text corpora compress 3-10x, repetitive generated ones ~30x; a gzip bomb, 1000x and more


class _CappedGzip(gzip.GzipFile):
    """A .gz corpus whose decompressed bytes may not pass MAX_GZIP_RATIO times the file's size (and
    16 MiB): a DataError then, naming the file, instead of reading a gzip bomb (800 KB that
    decompress to 209 million lines) until memory runs out."""

    def __init__(self, path: Path, compressed: int) -> None:
        super().__init__(path, "rb")
        self._path, self._cap, self._seen = path, max(MAX_GZIP_RATIO * compressed, 16 << 20), 0

    def read1(self, size: int = -1) -> bytes:
        data = super().read1(size)
        self._seen += len(data)
        if self._seen > self._cap:
            raise DataError(f"decompresses to over {self._cap:,} bytes, more than {MAX_GZIP_RATIO} times its size: "
                            "not a text corpus (a gzip bomb?); if it is real, decompress it yourself and give "
                            "the plain file", path=self._path)
        return data


def physical_lines(stream: ByteStream, path: PathLike) -> Iterator[bytes]:
    """The lines of `stream` without their ends ("\\n", "\\r\\n" or a lone "\\r"), yielded as
    soon as they arrive (`read1`, so an interactive stdin gets each line as it is typed). A line
    longer than MAX_LINE_BYTES is a DataError naming `path` and the line: memory stays bounded
    even for an endless line."""
    pending = b""
    number = 0
    while True:
        chunk = stream.read1(_CHUNK)
        pending += chunk
        start = 0
        for match in _LINE_END.finditer(pending):
            if chunk and match.end() == len(pending) and match.group() == b"\r":
                break  # maybe the first half of a "\r\n" cut between two chunks: wait for the next
            number += 1
            if match.start() - start > MAX_LINE_BYTES:
                _too_long(path, number)
            yield pending[start : match.start()]
            start = match.end()
        pending = pending[start:]
        if len(pending) > MAX_LINE_BYTES:
            _too_long(path, number + 1)
        if not chunk:
            break
    if pending:
        yield pending


def _too_long(path: PathLike, number: int) -> None:
    raise DataError(f"line longer than {MAX_LINE_BYTES // (1 << 20)} MiB; that is no sentence (is this a "
                    "text file, one sentence per line?)", path=path, line=number)


def decode_line(data: bytes, path: PathLike, number: int) -> str:
    """One line's bytes -> text: strict UTF-8, a byte order mark on line 1 dropped. Invalid UTF-8
    and control characters (C0 but tab) are DataErrors naming `path`, the line and the column."""
    try:
        line = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"invalid UTF-8 (byte {data[e.start]:#04x} at column {e.start + 1}); "
                        "re-encode the file as UTF-8", path=path, line=number) from None
    if number == 1 and line.startswith("\ufeff"):
        line = line[1:]  # a UTF-8 byte order mark is not text
    bad = control_character(line)
    if bad is not None:
        raise DataError(f"{bad}; text must hold no control characters but tab (is this a binary or corrupt "
                        "file?)", path=path, line=number)
    return line


def control_character(text: str) -> str | None:
    """"control character NUL (U+0000) at column 3" for the first C0 control character but tab in
    `text` (a line end included), or None when there is none."""
    bad = _CONTROL.search(text)
    if bad is None:
        return None
    code = ord(bad.group())
    name = f"{_C0_NAMES[code]} (U+{code:04X})" if code in _C0_NAMES else f"U+{code:04X}"
    return f"control character {name} at column {bad.start() + 1}"


_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(text: str) -> str | None:
    """Why `text` cannot be a sentence, or None: a control character (see `control_character`),
    or a lone UTF-16 surrogate ("\\ud800" in JSON), which is no character and has no UTF-8 form."""
    bad = _SURROGATE.search(text)
    if bad is not None:
        return f"a lone UTF-16 surrogate (U+{ord(bad.group()):04X}) at column {bad.start() + 1}, which is no character"
    return control_character(text)


def _lines(path: PathLike, *, streams: bool = False) -> Iterator[tuple[int, str]]:
    """(1-based line number, decoded line without its line end) for every line up to the last
    non-empty one. Raises DataError for undecodable bytes, control characters, over-long lines and
    empty lines before the end."""
    path = Path(path)
    with _open_binary(path, streams=streams) as raw:
        number = 0
        first_empty: int | None = None  # first line of the current run of empty lines
        try:
            for number, data in enumerate(physical_lines(raw, path), start=1):
                line = decode_line(data, path, number)
                if not line:
                    if first_empty is None:
                        first_empty = number
                    continue
                if first_empty is not None:
                    raise DataError(
                        "empty line; every line needs a sentence (only empty lines at the end of a "
                        "file are ignored)",
                        path=path,
                        line=first_empty,
                    )
                yield number, line
        except (OSError, EOFError, zlib.error) as e:
            # A truncated or corrupt .gz surfaces while reading, not while opening.
            raise DataError(f"cannot read after line {number}: {e}", path=path, line=number + 1) from None


def _side(text: str, what: str, path: PathLike, number: int) -> str:
    text = normalize(text)
    if not text:
        raise DataError(f"empty {what} after normalization", path=path, line=number)
    return text


def read_tsv(path: PathLike, *, reverse: bool = False, streams: bool = False) -> Iterator[Pair]:
    """Stream pairs from a tab-separated file: column 1 = source, column 2 = target.

    Further columns are ignored, so the Tatoeba/manythings.org files (`Go.\\tVa !\\tCC-BY ...`)
    read as they are. `reverse=True` swaps the columns (source = column 2). Plain or `.gz` (by
    suffix). Raises DataError (file and line) for a line without a tab, an empty side, invalid
    UTF-8, an empty line before the end, an empty corpus or a missing file.
    """
    src_col, tgt_col = (2, 1) if reverse else (1, 2)
    count = 0
    for number, line in _lines(path, streams=streams):
        columns = line.split("\t")
        if len(columns) < 2:
            raise DataError(
                "no tab on this line; a TSV corpus needs 'source<TAB>target'", path=path, line=number
            )
        src = _side(columns[src_col - 1], f"source (column {src_col})", path, number)
        tgt = _side(columns[tgt_col - 1], f"target (column {tgt_col})", path, number)
        count += 1
        yield Pair(src, tgt)
    if count == 0:
        raise DataError("empty corpus: no sentence pairs", path=path)


def read_parallel(src_path: PathLike, tgt_path: PathLike, *, streams: bool = False) -> Iterator[Pair]:
    """Stream pairs from two line-aligned files (line i of one translates line i of the other);
    `streams`: either may be a pipe or named pipe (a command that reads it once).

    Plain or `.gz`. Raises DataError for files of different lengths (naming both and the line where
    the shorter one ended), an empty side, invalid UTF-8, an empty corpus or a missing file.
    """
    src_lines, tgt_lines = _lines(src_path, streams=streams), _lines(tgt_path, streams=streams)
    count = 0
    while True:
        s = next(src_lines, None)
        t = next(tgt_lines, None)
        if s is None and t is None:
            break
        if s is None or t is None:
            short, long = (src_path, tgt_path) if s is None else (tgt_path, src_path)
            if count == 0:
                raise DataError(f"file is empty but {long} is not; the files must be line-aligned", path=short)
            raise DataError(
                f"no more sentences after line {count} but {long} goes on (line {count + 1}); "
                "the files must have the same number of lines",
                path=short,
                line=count,
            )
        (number, src), (_, tgt) = s, t
        count += 1
        yield Pair(_side(src, "source", src_path, number), _side(tgt, "target", tgt_path, number))
    if count == 0:
        raise DataError(f"empty corpus: no sentences (and {tgt_path} is empty too)", path=src_path)


def load_pairs(
    *,
    tsv: PathLike | None = None,
    src: PathLike | None = None,
    tgt: PathLike | None = None,
    reverse: bool = False,
) -> list[Pair]:
    """Read a whole corpus, either `tsv=` or both `src=` and `tgt=`; `reverse` swaps the sides."""
    if tsv is not None and (src is not None or tgt is not None):
        raise ValueError("give either tsv= or src=/tgt=, not both")
    if tsv is not None:
        return list(read_tsv(tsv, reverse=reverse))
    if src is None or tgt is None:
        raise ValueError("give tsv=, or both src= and tgt=")
    if reverse:
        src, tgt = tgt, src
    return list(read_parallel(src, tgt))
