import gzip
from pathlib import Path

import pytest

from heed.data.corpus import Pair, load_pairs, normalize, read_parallel, read_tsv
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
