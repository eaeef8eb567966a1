import gzip
import os
import re
from pathlib import Path

import pytest

from heed.data.corpus import MAX_LINE_BYTES, Pair, load_pairs, normalize, physical_lines, read_parallel, read_tsv
from heed.errors import DataError


def write(path: Path, data: str | bytes) -> Path:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as f:
            f.write(raw)
    else:
        path.write_bytes(raw)
    return path


def test_normalize_composes_and_turns_no_break_spaces_into_spaces():
    assert normalize("Va\u202f!") == "Va !"  # narrow no-break space, as in French Tatoeba
    assert normalize("10\u00a0000\u2007km") == "10 000 km"
    assert normalize("Cafe\u0301") == "Café"  # NFD -> NFC
    assert normalize("Café") == "Caf\u00e9"
    assert normalize("  a \t\t b \n") == "a b"
    assert normalize("ab\u2060cd\ufeff") == "abcd"  # zero-width joiners join, they do not split


def test_read_tsv_reads_manythings_three_column_format(tmp_path):
    path = write(tmp_path / "fra.txt", "Go.\tVa\u202f!\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272\nHi.\tSalut !\tCC-BY\n")
    assert list(read_tsv(path)) == [Pair("Go.", "Va !"), Pair("Hi.", "Salut !")]


def test_read_tsv_reverse_swaps_columns(tmp_path):
    path = write(tmp_path / "c.tsv", "Go.\tVa !\n")
    assert list(read_tsv(path, reverse=True)) == [Pair("Va !", "Go.")]


def test_read_tsv_reads_gzip_and_crlf(tmp_path):
    path = write(tmp_path / "c.tsv.gz", "a b\tc d\r\ne\tf\r\n")
    assert list(read_tsv(path)) == [Pair("a b", "c d"), Pair("e", "f")]


def test_read_tsv_is_streamed(tmp_path):
    path = write(tmp_path / "c.tsv", "a\tb\nno tab here\n")
    pairs = read_tsv(path)
    assert next(pairs) == Pair("a", "b")  # the bad line 2 is not read yet
    with pytest.raises(DataError):
        next(pairs)


def test_trailing_empty_lines_are_ignored_but_inner_empty_lines_are_errors(tmp_path):
    path = write(tmp_path / "c.tsv", "a\tb\n\n\n")
    assert list(read_tsv(path)) == [Pair("a", "b")]
    path = write(tmp_path / "d.tsv", "a\tb\n\nc\td\n")
    with pytest.raises(DataError, match=r"d\.tsv:2: empty line"):
        list(read_tsv(path))
    src, tgt = write(tmp_path / "s", "a\n\nb\n"), write(tmp_path / "t", "x\ny\nz\n")
    with pytest.raises(DataError, match=r"s:2: empty line"):
        list(read_parallel(src, tgt))


def test_tsv_line_without_tab_names_file_and_line(tmp_path):
    path = write(tmp_path / "c.tsv", "a\tb\nc d\n")
    with pytest.raises(DataError) as e:
        list(read_tsv(path))
    assert str(e.value).startswith(f"{path}:2: no tab")
    assert (e.value.path, e.value.line) == (str(path), 2)


def test_empty_side_names_file_and_line(tmp_path):
    path = write(tmp_path / "c.tsv", "a\tb\nc\t \u00a0\n")
    with pytest.raises(DataError, match=r"c\.tsv:2: empty target \(column 2\)"):
        list(read_tsv(path))
    with pytest.raises(DataError, match=r"c\.tsv:2: empty source \(column 2\)"):
        list(read_tsv(path, reverse=True))


def test_invalid_utf8_names_file_and_line_not_unicode_error(tmp_path):
    path = write(tmp_path / "c.tsv", b"a\tb\nc\td\ncaf\xe9\tx\n")
    with pytest.raises(DataError, match=r"c\.tsv:3: invalid UTF-8 \(byte 0xe9 at column 4\)"):
        list(read_tsv(path))


def test_invalid_utf8_in_gzip_names_line(tmp_path):
    path = write(tmp_path / "c.txt.gz", b"ok\n\xff\n")
    with pytest.raises(DataError, match=r"c\.txt\.gz:2: invalid UTF-8"):
        list(read_parallel(path, path))


def test_corrupt_gzip_is_a_data_error(tmp_path):
    path = write(tmp_path / "c.tsv.gz", "a\tb\n" * 100)
    path.write_bytes(path.read_bytes()[:30])  # truncated
    with pytest.raises(DataError, match=r"c\.tsv\.gz"):
        list(read_tsv(path))


def test_empty_corpus_names_file(tmp_path):
    path = write(tmp_path / "c.tsv", "\n\n")
    with pytest.raises(DataError, match=r"c\.tsv: empty corpus"):
        list(read_tsv(path))
    path = write(tmp_path / "e.tsv.gz", "")
    with pytest.raises(DataError, match=r"e\.tsv\.gz: empty corpus"):
        list(read_tsv(path))
    src, tgt = write(tmp_path / "s.txt", ""), write(tmp_path / "t.txt", "")
    with pytest.raises(DataError, match=r"s\.txt: empty corpus"):
        list(read_parallel(src, tgt))


def test_missing_file_names_file(tmp_path):
    with pytest.raises(DataError, match=r"nope\.tsv: no such file"):
        list(read_tsv(tmp_path / "nope.tsv"))
    with pytest.raises(DataError, match=r"nope\.de: no such file"):
        load_pairs(src=write(tmp_path / "x.en", "a\n"), tgt=tmp_path / "nope.de")


def test_read_parallel_pairs_lines_plain_and_gz(tmp_path):
    src = write(tmp_path / "train.en.gz", "Hello  world\nGood\u00a0night\n")
    tgt = write(tmp_path / "train.de", "Hallo Welt\nGute Nacht\n\n")
    assert list(read_parallel(src, tgt)) == [Pair("Hello world", "Hallo Welt"), Pair("Good night", "Gute Nacht")]


@pytest.mark.parametrize("shorter", ["src", "tgt"])
def test_mismatched_line_counts_name_both_files_and_where_shorter_ended(tmp_path, shorter):
    long_path = write(tmp_path / "long.txt", "a\nb\nc\n")
    short_path = write(tmp_path / "short.txt", "x\ny\n")
    args = (short_path, long_path) if shorter == "src" else (long_path, short_path)
    with pytest.raises(DataError) as e:
        list(read_parallel(*args))
    message = str(e.value)
    assert message.startswith(f"{short_path}:2: no more sentences after line 2")
    assert f"{long_path} goes on (line 3)" in message


def test_parallel_empty_side_names_the_right_file(tmp_path):
    src = write(tmp_path / "s.txt", "a\nb\n")
    tgt = write(tmp_path / "t.txt", "x\n\u202f\n")  # only a no-break space: empty after normalizing
    with pytest.raises(DataError, match=r"t\.txt:2: empty target"):
        list(read_parallel(src, tgt))


def test_load_pairs_takes_exactly_one_form(tmp_path):
    tsv = write(tmp_path / "c.tsv", "a\tb\n")
    src, tgt = write(tmp_path / "s", "a\n"), write(tmp_path / "t", "b\n")
    assert load_pairs(tsv=tsv) == [Pair("a", "b")]
    assert load_pairs(src=src, tgt=tgt) == [Pair("a", "b")]
    assert load_pairs(src=src, tgt=tgt, reverse=True) == [Pair("b", "a")]
    with pytest.raises(ValueError):
        load_pairs()
    with pytest.raises(ValueError):
        load_pairs(tsv=tsv, src=src, tgt=tgt)
    with pytest.raises(ValueError):
        load_pairs(src=src)


# ------------------------------------------------------------------- hostile files and bytes


def test_a_fifo_is_refused_before_opening_so_nothing_hangs(tmp_path):
    import subprocess
    import sys

    fifo = tmp_path / "pipe.tsv"
    os.mkfifo(fifo)  # no writer: opening it would block forever
    code = f"from heed.data.corpus import load_pairs; load_pairs(tsv={str(fifo)!r})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"DataError: {fifo}: is a FIFO (named pipe), not a regular file" in done.stderr


@pytest.mark.skipif(not Path("/dev/zero").is_char_device(), reason="no /dev/zero character device here")
def test_a_device_is_refused_as_a_corpus():
    with pytest.raises(DataError, match=r"^/dev/zero: is a character device, not a regular file"):
        list(read_tsv("/dev/zero"))


def test_a_symlink_to_a_file_reads_as_the_file(tmp_path):
    target = write(tmp_path / "c.tsv", "a\tb\n")
    (tmp_path / "link.tsv").symlink_to(target)
    assert list(read_tsv(tmp_path / "link.tsv")) == [Pair("a", "b")]


def test_a_line_over_one_mib_is_an_error_naming_the_line(tmp_path):
    path = write(tmp_path / "c.tsv", b"a\tb\n" + b"x" * (MAX_LINE_BYTES + 1) + b"\tc\n")
    with pytest.raises(DataError, match=r"c\.tsv:2: line longer than 1 MiB"):
        list(read_tsv(path))
    zeros = write(tmp_path / "zeros.tsv.gz", bytes(3 * MAX_LINE_BYTES))  # no newline at all
    with pytest.raises(DataError, match=r"zeros\.tsv\.gz:1: line longer than 1 MiB"):
        list(read_tsv(zeros))


class Endless:
    """A stream that never ends and holds no line end, counting what was read from it."""

    def __init__(self) -> None:
        self.read = 0

    def read1(self, size: int = -1) -> bytes:
        self.read += size
        return b"x" * size


def test_an_endless_line_is_refused_after_reading_about_one_mib():
    stream = Endless()
    with pytest.raises(DataError, match=r"<endless>:1: line longer than 1 MiB"):
        list(physical_lines(stream, "<endless>"))
    assert stream.read <= MAX_LINE_BYTES + (1 << 17)  # memory stays bounded


def test_cr_only_files_read_line_by_line_with_editor_line_numbers(tmp_path):
    lines = [f"s{i}\tt{i}" for i in range(300)]
    path = write(tmp_path / "mac.tsv", "\r".join(lines) + "\r")
    assert list(read_tsv(path)) == [Pair(f"s{i}", f"t{i}") for i in range(300)]
    gz = write(tmp_path / "mac.tsv.gz", "\r".join(lines))
    assert len(list(read_tsv(gz))) == 300
    bad = write(tmp_path / "bad.tsv", "a\tb\rno tab\rc\td\r")
    with pytest.raises(DataError, match=r"bad\.tsv:2: no tab"):
        list(read_tsv(bad))
    src, tgt = write(tmp_path / "s", "a\rb\rc\r"), write(tmp_path / "t", "x\r\ny\r\nz\r\n")
    assert list(read_parallel(src, tgt)) == [Pair("a", "x"), Pair("b", "y"), Pair("c", "z")]


class Chunks:
    """A stream that returns the given chunks, one per read1 (as a pipe may)."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)

    def read1(self, size: int = -1) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


def test_a_crlf_cut_between_two_reads_is_one_line_end():
    assert list(physical_lines(Chunks(b"a\r", b"\nb\r", b"\r\nc"), "x")) == [b"a", b"b", b"", b"c"]
    assert list(physical_lines(Chunks(b"a\r"), "x")) == [b"a"]
    assert list(physical_lines(Chunks(b"a\n\n"), "x")) == [b"a", b""]


@pytest.mark.parametrize(("data", "what", "column"), [
    (b"a\x00b\tc\n", "NUL (U+0000)", 2),
    (b"ab\tc\x1b[0m\n", "ESC (U+001B)", 5),
    ("é\tb\x07\n".encode(), "U+0007", 4),  # columns count characters, not bytes
])
def test_control_characters_are_errors_naming_line_and_column(tmp_path, data, what, column):
    path = write(tmp_path / "c.tsv", b"ok\tfine\n" + data)
    with pytest.raises(DataError, match=rf"c\.tsv:2: control character {re.escape(what)} at column {column};"):
        list(read_tsv(path))


def test_tabs_and_a_byte_order_mark_are_not_control_characters(tmp_path):
    path = write(tmp_path / "c.tsv", "\ufeffa\tb\textra\n")
    assert list(read_tsv(path)) == [Pair("a", "b")]


def test_a_gzipped_named_pipe_is_refused_before_it_is_opened(tmp_path, deadline):
    """A .gz read through a pipe would inflate without the gzip-bomb bound (a ratio of the file's
    size, which a pipe has not): refused in one line naming it, at once (no writer is waited for),
    and the plain file beside it is read."""
    fifo = tmp_path / "src.gz"
    os.mkfifo(fifo)
    plain = tmp_path / "tgt.txt"
    plain.write_text("1998-03-03\n", encoding="utf-8")
    with deadline(10), pytest.raises(DataError) as e:
        list(read_parallel(fifo, plain, streams=True))
    assert str(e.value).startswith(f"{fifo}: a gzipped pipe is not read") and "<(zcat FILE.gz)" in str(e.value)
