"""Both directions (heed.train.pair): `heed train --both-directions` trains a config and its reverse
and records the pair; `heed align` then symmetrises with the reverse model; a reverse model that is
not this one's other direction, and a config with nothing to swap, are refused in one line (exit 2)
with nothing written."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from cli_helpers import assert_user_error, invoke

from heed.data.pharaoh import read_alignments
from heed.train.pair import PAIR_FILE, recorded_reverse


@pytest.fixture(scope="module")
def pair(trained_pair: tuple[Path, Path]) -> tuple[Path, Path]:
    """conftest's `trained_pair`: (forward, reverse) run dirs of `heed train --both-directions`."""
    return trained_pair


def test_both_directions_trains_the_corpus_swapped_and_records_the_pair(pair):
    forward, reverse = pair
    forward_cfg = yaml.safe_load((forward / "model" / "config.yaml").read_text(encoding="utf-8"))
    reverse_cfg = yaml.safe_load((reverse / "model" / "config.yaml").read_text(encoding="utf-8"))
    assert not forward_cfg["data"].get("reverse") and reverse_cfg["data"]["reverse"] is True
    assert recorded_reverse(forward / "model") == ((reverse / "model").resolve(), "grow-diag-final")
    assert recorded_reverse(reverse / "model") == ((forward / "model").resolve(), "grow-diag-final")
    assert json.loads((forward / "model" / PAIR_FILE).read_text(encoding="utf-8"))["other"] == "../../dates-reverse/model"


def _align(model: Path, files: dict[str, Path], out: Path, *args: object):
    return invoke("align", model, "--src", files["test_src"], "--tgt", files["test_ref"], "-o", out, *args)


def test_heed_align_symmetrises_with_the_recorded_reverse_model(pair, tiny_corpus, tmp_path):
    forward, reverse = pair
    recorded = _align(forward, tiny_corpus, tmp_path / "recorded.align")
    assert recorded.exit_code == 0, recorded.output
    assert "symmetrised with the reverse model its pair records" in recorded.stderr
    given = _align(forward, tiny_corpus, tmp_path / "given.align", "--reverse", reverse / "model", "--one-way")
    assert_user_error(given, "--one-way", "--reverse")
    given = _align(forward, tiny_corpus, tmp_path / "given.align", "--reverse", reverse / "model")
    assert given.exit_code == 0, given.output
    assert read_alignments(tmp_path / "recorded.align") == read_alignments(tmp_path / "given.align")
    alone = _align(forward, tiny_corpus, tmp_path / "alone.align", "--one-way")
    both = _align(forward, tiny_corpus, tmp_path / "both.align", "--symmetrize", "intersect")
    either = _align(forward, tiny_corpus, tmp_path / "either.align", "--symmetrize", "union")
    assert alone.exit_code == both.exit_code == either.exit_code == 0
    one, agreed, any_ = (read_alignments(tmp_path / f"{n}.align") for n in ("alone", "both", "either"))
    assert all(a <= o <= u for a, o, u in zip(agreed, one, any_))  # intersect within this direction within union
    assert any(a != u for a, u in zip(agreed, any_))  # the reverse model was read


def test_a_reverse_model_of_the_same_direction_is_refused(pair, tiny_corpus, tmp_path):
    forward, _ = pair
    result = _align(forward, tiny_corpus, tmp_path / "out.align", "--reverse", forward / "model")
    assert_user_error(result, "not this model's other direction", "the same direction")
    assert not (tmp_path / "out.align").exists()


def test_a_damaged_pair_record_is_refused(pair, tiny_corpus, tmp_path):
    forward, _ = pair
    copy = tmp_path / "copy"
    shutil.copytree(forward / "model", copy)  # the reverse it names is not beside the copy
    result = _align(copy, tiny_corpus, tmp_path / "out.align")
    assert_user_error(result, PAIR_FILE, "holds no model", "--reverse")
    (copy / PAIR_FILE).write_text("{", encoding="utf-8")
    assert_user_error(_align(copy, tiny_corpus, tmp_path / "out.align"), PAIR_FILE, "not a pair record")
    assert not (tmp_path / "out.align").exists()
    assert _align(copy, tiny_corpus, tmp_path / "out.align", "--one-way").exit_code == 0


def test_both_directions_of_a_generated_task_is_refused_before_training(tmp_path):
    config = tmp_path / "dates.yaml"
    config.write_text(yaml.safe_dump({"data": {"task": "dates"}, "output_dir": str(tmp_path / "run")}), encoding="utf-8")
    assert_user_error(invoke("train", config, "--both-directions"), "--both-directions", "task 'dates'")
    assert not (tmp_path / "run").exists()
