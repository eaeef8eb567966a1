"""Given targets are cut as sources are (issue 56): `heed align --tgt`, `lens --tgt`, `attribute --tgt`
and `--contrast-file` read at most the model's max_tgt_len tokens of a target, with one warning naming
the file and line (a 20,000-character target cost 2.7 GB; a 900 KB one asked torch for terabytes and
died with a traceback); and their errors name the file and line, not the library's `tgt_texts[k]`."""
from __future__ import annotations

import json
import shutil

import pytest
from cli_helpers import assert_user_error, invoke

from heed.api import Translator
from heed.cli.io import cut_long_texts, max_tgt_len

LONG = "1998-03-03" * 2000  # 20,000 characters of the dates task's target alphabet, one "word"


@pytest.fixture
def pairs(tmp_path):
    src = tmp_path / "a.src"
    src.write_text("le 3 mars 1998\n1 May 2001\n", encoding="utf-8")
    tgt = tmp_path / "a.tgt"
    tgt.write_text(f"1998-03-03\n{LONG}\n", encoding="utf-8")
    return src, tgt


def _one_warning(stderr: str, name: str, limit: int = 100) -> str:
    warnings = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, stderr
    assert f"{name}: line 2 is longer than the model's max_tgt_len ({limit} tokens)" in warnings[0], warnings
    return warnings[0]


def _with_max_tgt_len(run, directory, limit: int):
    """A copy of the run's model that trained on targets of at most `limit` tokens (its config says so)."""
    from model_files import rehash

    shutil.copytree(run / "model", directory)
    config = directory / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("max_tgt_len: 100", f"max_tgt_len: {limit}"),
                      encoding="utf-8")
    return rehash(directory)


def test_a_long_target_is_cut_to_the_words_within_the_limit_else_inside_its_first_word(trained_run, capsys):
    translator = Translator.load(trained_run)
    limit = max_tgt_len(translator)
    assert limit == translator.config.data.max_tgt_len == 100
    words = " ".join(["1998-03-03"] * 40)  # 10 tokens a word and a space between: more than 100
    short = "2001-05-01"
    cut = cut_long_texts(translator, [short, words, LONG], "b.tgt")
    assert cut[0] == short  # within the limit: as it was
    assert words.startswith(cut[1]) and cut[1].endswith("1998-03-03")
    assert len(translator.codec.tgt_tokens(cut[1])) <= limit
    assert len(translator.codec.tgt_tokens(cut[1] + " 1998-03-03")) > limit  # as many words as fit
    assert cut[2] == LONG[:limit] and len(translator.codec.tgt_tokens(cut[2])) == limit  # characters, one token each
    assert "b.tgt: lines 2, 3 are longer than the model's max_tgt_len (100 tokens)" in capsys.readouterr().err


def test_align_reads_the_first_tokens_of_a_long_target_with_one_warning(trained_run, pairs):
    src, tgt = pairs
    out = invoke("align", trained_run, "--src", src, "--tgt", tgt, "--tgt-units", "chars")
    assert out.exit_code == 0, out.output
    _one_warning(out.stderr, str(tgt))
    links = [[tuple(map(int, link.split("-"))) for link in line.split()] for line in out.stdout.splitlines()]
    assert len(links) == 2 and links[1] and max(j for _, j in links[1]) < 100


def test_a_900_kb_target_is_cut_not_a_traceback(trained_run, tmp_path):
    src, tgt = tmp_path / "a.src", tmp_path / "a.tgt"
    src.write_text("le 3 mars 1998\n", encoding="utf-8")
    tgt.write_text("1998-03-03" * 90_000 + "\n", encoding="utf-8")
    out = invoke("align", trained_run, "--src", src, "--tgt", tgt)
    assert out.exit_code == 0, out.output
    assert "max_tgt_len" in out.stderr and "Traceback" not in out.output


def test_attribute_cuts_tgt_and_contrast_file_alike(trained_run, pairs, tmp_path):
    src, tgt = pairs
    model = _with_max_tgt_len(trained_run, tmp_path / "model", 12)  # attributing 100 outputs takes long
    given = invoke("attribute", model, "--src", src, "--tgt", tgt, "--steps", "1", "--method", "grad_x_input",
                   "-o", tmp_path / "a.json")
    assert given.exit_code == 0, given.output
    _one_warning(given.stderr, str(tgt), 12)
    written = json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))
    assert len(written[1]["tgt_tokens"]) == 12
    contrasted = invoke("attribute", model, "--src", src, "--contrast-file", tgt, "--steps", "1",
                        "--method", "grad_x_input", "-o", tmp_path / "c.json")
    assert contrasted.exit_code == 0, contrasted.output
    _one_warning(contrasted.stderr, str(tgt), 12)


def test_lens_cuts_a_long_target_and_names_the_line_of_a_bad_one(transformer_run, pairs, tmp_path):
    src, tgt = pairs
    out = invoke("lens", transformer_run, "--src", src, "--tgt", tgt, "-o", tmp_path / "l.json")
    assert out.exit_code == 0, out.output
    _one_warning(out.stderr, str(tgt))
    assert len(json.loads((tmp_path / "l.json").read_text(encoding="utf-8"))[1]["tgt_tokens"]) == 100
    bad = tmp_path / "bad.tgt"
    bad.write_text("1998-03-03\n1998 03 03\n", encoding="utf-8")  # a space: a token the dates targets never had
    refused = invoke("lens", transformer_run, "--src", src, "--tgt", bad)
    assert_user_error(refused, f"{bad}: line 2:", "is not a token of the model's target vocabulary")
    assert "tgt_texts" not in refused.stderr


def test_attribute_names_the_line_of_a_bad_target_not_the_list_index(trained_run, pairs, tmp_path):
    src, _ = pairs
    bad = tmp_path / "bad.tgt"
    bad.write_text("1998-03-03\n1998 03 03\n", encoding="utf-8")
    refused = invoke("attribute", trained_run, "--src", src, "--tgt", bad, "--steps", "1", "-o", tmp_path / "a.json")
    assert_user_error(refused, f"{bad}: line 2:", "is not a token of the model's target vocabulary")
