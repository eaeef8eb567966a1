"""Does quantization move attention? The gap between two models' attention on the same pairs
(heed.explain.attention_gap, Translator.attention_gap, `heed align --beside`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from heed.api import Translator
from heed.data.pharaoh import (
    parse_gold_pharaoh,
    read_gold_alignments,
)
from heed.errors import HeedError
from heed.explain.align import alignment_error_rate
from heed.explain.attention_gap import attention_gap
from heed.export.onnx import export_model


def test_the_gap_by_hand() -> None:
    a = np.array([[1.0, 0.0], [0.0, 1.0]])
    b = np.array([[0.4, 0.6], [0.0, 1.0]])
    gap = attention_gap([a, None, np.ones((1, 3)) / 3], [b, None, np.ones((1, 3)) / 3])
    assert gap.mean_abs[0] == pytest.approx(0.3) and gap.max_abs[0] == pytest.approx(0.6)
    assert gap.mean_abs[1] is None and gap.mean_abs[2] == 0.0
    assert gap.mean == pytest.approx((0.3 * 4 + 0 * 3) / 7)  # cell-weighted
    assert gap.max == pytest.approx(0.6)
    assert gap.moved == [1, 0, 0] and gap.moved_share == pytest.approx(1 / 3)
    assert "mean |Δ attention| 0.1714 per cell (max 0.600)" in gap.summary()
    assert "moved in 33.3% of 3 output tokens" in gap.summary()


@pytest.mark.parametrize("first, second, message", [
    ([np.zeros((2, 2))], [], "one per pair"),
    ([np.zeros((2, 2))], [np.zeros((2, 3))], "shapes"),
    ([np.zeros((2, 2))], [None], "one side has attention"),
])
def test_the_gap_refuses_what_cannot_be_compared(first: list, second: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        attention_gap(first, second)


@pytest.fixture(scope="module")
def exports(trained_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exports")
    return {"float32": export_model(trained_run, root / "float32"),
            "int8": export_model(trained_run, root / "int8", int8=True)}


def _pairs(gold_files: Path) -> tuple[list[str], list[str]]:
    return ((gold_files / "test.src").read_text().splitlines(), (gold_files / "test.tgt").read_text().splitlines())


def test_a_float32_export_keeps_the_attention_and_int8_moves_it_a_little(trained_run: Path, exports: dict[str, Path],
                                                                       gold_files: Path) -> None:
    src, tgt = _pairs(gold_files)
    model = Translator.load(trained_run)
    itself = model.attention_gap(model, src, tgt)
    assert itself.mean == 0.0 and itself.moved_share == 0.0 and sum(itself.rows) > len(src)
    exact = model.attention_gap(Translator.load(exports["float32"]), src, tgt)
    assert exact.max < 1e-5 and exact.moved_share == 0.0
    quantized = model.attention_gap(Translator.load(exports["int8"]), src, tgt)
    assert 0.0 < quantized.mean < 0.05 and quantized.max < 0.5
    assert quantized.cells == exact.cells  # the same cells, pair by pair


def test_models_of_other_vocabularies_are_refused(trained_run: Path, word_run: Path, gold_files: Path) -> None:
    src, tgt = _pairs(gold_files)
    with pytest.raises(HeedError, match="differ; their attention can only be compared"):
        Translator.load(trained_run).attention_gap(Translator.load(word_run), src, tgt)


def test_align_beside_the_int8_export(trained_run: Path, exports: dict[str, Path], gold_files: Path,
                                      heed_cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "links.txt"
    result = heed_cli("align", trained_run, "--src", gold_files / "test.src", "--tgt", gold_files / "test.tgt",
                      "--tgt-units", "chars", "--gold", gold_files / "test.align", "--beside", exports["int8"],
                      "-o", out)
    assert result.exit_code == 0, result.output
    src, tgt = _pairs(gold_files)
    gap = Translator.load(trained_run).attention_gap(Translator.load(exports["int8"]), src, tgt)
    assert f"beside {exports['int8']}: {gap.summary()}" in result.stdout
    sure, possible = read_gold_alignments(gold_files / "test.align")
    ours = [parse_gold_pharaoh(line)[1] for line in out.read_text().splitlines()]
    assert f"AER = {alignment_error_rate(ours, sure, possible):.4f}   (20 sentences" in result.stdout
    from heed.explain.align_methods import AlignOptions

    theirs = [set(a.links) for a in Translator.load(exports["int8"]).align(src, tgt, options=AlignOptions(tgt_units="chars"))]
    assert f"AER = {alignment_error_rate(theirs, sure, possible):.4f}   {exports['int8']} (--beside)" in result.stdout


def test_align_beside_mistakes(trained_run: Path, word_run: Path, gold_files: Path, heed_cli: Any,
                               assert_user_error: Any) -> None:
    args = ["align", trained_run, "--src", gold_files / "test.src", "--tgt", gold_files / "test.tgt"]
    assert_user_error(heed_cli(*args, "--beside", word_run), "differ", "compared")
    assert_user_error(heed_cli(*args, "--gold", gold_files / "test.align", "--tgt-units", "chars", "--sweep",
                               "--beside", trained_run), "--beside", "--sweep")
