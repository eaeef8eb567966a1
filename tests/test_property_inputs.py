"""Whatever bytes a user's files hold, heed's readers answer with a HeedError (a message naming
the file and line) or with data: never another exception. Random bytes, random text and random
YAML-ish text go to the corpus readers and the config loader (hypothesis, derandomized so CI runs
the same examples every time)."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heed.config import load_config
from heed.data.corpus import read_parallel, read_tsv
from heed.errors import HeedError

SETTINGS = settings(max_examples=150, deadline=2000, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

# Bytes that make corpora interesting: line ends of every kind, tabs, NUL and other controls,
# a byte order mark, multi-byte UTF-8 (whole and cut), invalid bytes.
PIECES = [b"\n", b"\r", b"\r\n", b"\t", b" ", b"\x00", b"\x1b", b"\x0c", b"\xef\xbb\xbf", b"a", b"Va !",
          "é".encode(), "화".encode(), "화".encode()[:2], b"\xff", b"\x80", "\u2028".encode(), b"\xc0\xaf"]
corpus_bytes = st.one_of(st.binary(max_size=300),
                         st.lists(st.sampled_from(PIECES), max_size=60).map(b"".join))


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("property")


def only_heed_errors(read) -> None:
    """Run `read()`; a HeedError is a fine answer, anything else fails the property."""
    try:
        read()
    except HeedError:
        pass


@SETTINGS
@given(data=corpus_bytes, gz=st.booleans(), reverse=st.booleans())
def test_any_bytes_as_a_tsv_corpus_give_pairs_or_a_heed_error(directory, data, gz, reverse):
    path = directory / ("c.tsv.gz" if gz else "c.tsv")
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    only_heed_errors(lambda: list(read_tsv(path, reverse=reverse)))


@SETTINGS
@given(src=corpus_bytes, tgt=corpus_bytes)
def test_any_bytes_as_parallel_files_give_pairs_or_a_heed_error(directory, src, tgt):
    (directory / "p.src").write_bytes(src)
    (directory / "p.tgt").write_bytes(tgt)
    only_heed_errors(lambda: list(read_parallel(directory / "p.src", directory / "p.tgt")))


@SETTINGS
@given(data=st.binary(max_size=300))
def test_a_corrupt_gzip_corpus_is_a_heed_error(directory, data):
    path = directory / "bad.tsv.gz"
    path.write_bytes(b"\x1f\x8b" + data)  # a gzip magic number, then anything
    only_heed_errors(lambda: list(read_tsv(path)))


# YAML-ish text: the config's own section and field names, YAML punctuation and scalars.
YAML_TOKENS = ["data", "model", "train", "decode", "output_dir", "tsv", "src", "tgt", "split", "dev", "test",
               "hidden_size", "epochs", "lr", "beam_size", "max_src_len", "tokenizer", "kind", "bpe",
               ":", ": ", "\n", "  ", "- ", "{", "}", "[", "]", ",", "&a", "*a", "!!python/object:os.system",
               "'", '"', "#", "|", ">", "~", "null", "true", "1e400", "-1", "0", "nan", "3.5", "2e9", "x.tsv",
               "\t", "%YAML 1.2\n", "---\n", "...\n", "<<: ", "?", "\\", "é", "\x00"]
yamlish = st.lists(st.sampled_from(YAML_TOKENS), max_size=40).map("".join)


@SETTINGS
@given(text=yamlish)
def test_yaml_ish_text_as_a_config_gives_a_config_or_a_heed_error(directory, text):
    path = directory / "c.yaml"
    path.write_text(text, encoding="utf-8")
    only_heed_errors(lambda: load_config(path))


@SETTINGS
@given(data=st.binary(max_size=300))
def test_any_bytes_as_a_config_give_a_config_or_a_heed_error(directory, data):
    path = directory / "b.yaml"
    path.write_bytes(data)
    only_heed_errors(lambda: load_config(path))
