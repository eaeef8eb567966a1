"""A model directory written before the model families got their seam (issue 25) loads and
translates as it did then: tests/fixtures/model-before-seam/ and what it translated, recorded by
tests/fixtures/make_model_before_seam.py at heed 0.1.0 (2026-11-25). Any later change to loading,
the RNN model or search that changes an output or a score fails here."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import heed

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MODEL = FIXTURES / "model-before-seam"
EXPECTED = json.loads((FIXTURES / "model-before-seam-expected.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def translator():
    return heed.load(MODEL, device="cpu")


def test_greedy_outputs_and_scores_are_those_recorded(translator):
    got = translator.translate(EXPECTED["sources"])
    assert [t.tokens for t in got] == [e["tokens"] for e in EXPECTED["greedy"]]
    assert [t.score for t in got] == pytest.approx([e["score"] for e in EXPECTED["greedy"]], abs=1e-5)


def test_beam_n_best_lists_are_those_recorded(translator):
    got = translator.translate_nbest(EXPECTED["sources"], beam=3, n_best=2)
    assert [[t.tokens for t in nbest] for nbest in got] == [[e["tokens"] for e in n] for n in EXPECTED["beam3"]]
    assert [t.score for nbest in got for t in nbest] == pytest.approx(
        [e["score"] for n in EXPECTED["beam3"] for e in n], abs=1e-5)


def test_the_cli_translates_the_fixture_as_recorded(heed_cli, tmp_path):
    copy = shutil.copytree(MODEL, tmp_path / "model")  # the checkout's copy stays untouched
    result = heed_cli("translate", copy, "--device", "cpu", input="\n".join(EXPECTED["sources"]) + "\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [e["text"] for e in EXPECTED["greedy"]]
