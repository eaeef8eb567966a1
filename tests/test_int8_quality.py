"""int8 exports keep the translation quality: on a test set of 300 dates none of the tiny models
saw (BLEU 77 for the RNN, 27 for the Transformer of 200 training pairs), each int8 export's BLEU
(heed evaluate's sacreBLEU) is within 0.5 of its float32 model's, and the float32 exports give
PyTorch's outputs exactly. ONNX Runtime's dynamic int8 for an RNN and a Transformer, CTranslate2's int8 for
the Transformer (issue 26: every speed lever keeps the outputs)."""
from __future__ import annotations

from pathlib import Path

import pytest

import heed
from heed.api import Translator
from heed.data.dates import generate_dates
from heed.evaluate import evaluate
from heed.export.onnx import export_model

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def unseen_dates() -> tuple[list[str], list[str]]:
    """300 (written date, ISO date) pairs from another seed than the tiny corpus's."""
    pairs = generate_dates(n_train=1, n_dev=1, n_test=300, seed=1234, languages=("en", "fr"),
                           verbose_forms=False).test
    return [p.src for p in pairs], [p.tgt for p in pairs]


@pytest.fixture(scope="module")
def converged_rnn(tiny_config, tmp_path_factory) -> Path:
    """A Luong RNN with input feeding trained for 40 epochs of the tiny corpus (~6 s on one core)."""
    from heed.config import config_from_dict
    from heed.train import train

    output = tmp_path_factory.mktemp("rnn-converged") / "out"
    model = {"embed_size": 16, "hidden_size": 32, "input_feeding": True, "dropout": 0.0}
    train(config_from_dict({**tiny_config(output, epochs=40, lr=0.01, log_every=1000), "model": model}))
    return output


def bleu(translator: Translator, sources: list[str], references: list[str]) -> tuple[float, list[str]]:
    """(corpus BLEU as `heed evaluate` reports it, the outputs) of beam 4."""
    outputs = [t.text for t in translator.translate(sources, beam=4)]
    return evaluate(outputs, references).bleu, outputs


@pytest.mark.parametrize("family,kind", [("rnn", "onnx"), ("transformer", "onnx"), ("transformer", "ctranslate2")])
def test_an_int8_export_stays_within_half_a_bleu_point_and_float32_equals_pytorch(
        family, kind, converged_rnn, converged_transformer, unseen_dates, tmp_path) -> None:
    if kind == "ctranslate2":
        pytest.importorskip("ctranslate2")
    run = converged_rnn if family == "rnn" else converged_transformer
    sources, references = unseen_dates
    reference_bleu, reference_outputs = bleu(heed.load(str(run), device="cpu"), sources, references)
    assert reference_bleu > 20, "far from an untrained model (about 1), so the comparison means something"
    float_bleu, float_outputs = bleu(heed.load(str(export_model(run, tmp_path / "f32", kind=kind))), sources,
                                     references)
    assert float_outputs == reference_outputs and float_bleu == reference_bleu
    int8_bleu, _ = bleu(heed.load(str(export_model(run, tmp_path / "int8", kind=kind, int8=True))), sources,
                        references)
    assert abs(int8_bleu - reference_bleu) <= 0.5, (int8_bleu, reference_bleu)
