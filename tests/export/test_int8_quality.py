"""int8 exports keep the translation quality: on a test set of 300 dates none of the models saw,
each int8 export's BLEU (heed evaluate's sacreBLEU) is no more than INT8_MARGIN below its float32
model's, and the float32 exports give PyTorch's outputs exactly. ONNX Runtime's dynamic int8 for an
RNN and a Transformer, CTranslate2's int8 for the Transformer (issue 26: every speed lever keeps the
outputs).

The bar is one-sided: int8 scoring higher is no failure. It once was two-sided at 0.5 on a
Transformer of 200 training pairs (BLEU 32, barely trained, its choices near ties), and an AMD EPYC
Zen 5 gave int8 0.509 *above* float (issue 56). The models here are trained far enough for the
comparison to mean something: BLEU 66 for the Transformer of 1,000 pairs, 77 for the RNN, where
int8 drifted by at most 0.4 below float on a Zen 5 (ONNX 65.53 and CTranslate2 65.55 against 65.91)
and by at most 0.5 on the Zen 1 and Intel CPUs under the old bar; the margin of 1.0 doubles that."""
from __future__ import annotations

from pathlib import Path

import pytest

import heed
from heed.api import Translator
from heed.data.dates import generate_dates
from heed.evaluate import evaluate
from heed.export.onnx import export_model

pytest.importorskip("onnxruntime")

INT8_MARGIN = 1.0  # BLEU points int8 may lose against float32 (see the module doc)


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


@pytest.fixture(scope="module")
def trained_transformer(tmp_path_factory) -> Path:
    """A 1-layer Transformer trained on 1,000 dates for 30 epochs (~20 s on one core): BLEU 66 on
    the unseen dates, where conftest's converged_transformer (200 pairs) is at 32."""
    from heed.config import config_from_dict
    from heed.data.dates import write_splits
    from heed.train import train

    directory = tmp_path_factory.mktemp("transformer-1000")
    splits = generate_dates(n_train=1000, n_dev=20, n_test=20, seed=7, languages=("en", "fr"), verbose_forms=False)
    paths = write_splits(splits, directory / "data")
    model = {"family": "transformer", "layers": 1, "d_model": 32, "heads": 4, "ff_size": 64, "dropout": 0.0,
             "attention_dropout": 0.0}
    train(config_from_dict({
        "data": {"train": {"tsv": str(paths["train"])}, "dev": {"tsv": str(paths["dev"])}, "batch_tokens": 300},
        "model": model,
        "train": {"epochs": 30, "lr": 0.01, "log_every": 100_000, "threads": 1,
                  "early_stopping": {"metric": "exact_match", "patience": None},
                  "schedule": {"name": "warmup", "warmup_steps": 100, "decay": "none"}},
        "decode": {"max_len_b": 12, "max_len_a": 0.0},
        "output_dir": str(directory / "out")}))
    return directory / "out"


@pytest.mark.parametrize("family,kind", [("rnn", "onnx"), ("transformer", "onnx"), ("transformer", "ctranslate2")])
def test_an_int8_export_loses_at_most_a_bleu_point_and_float32_equals_pytorch(
        family, kind, converged_rnn, trained_transformer, unseen_dates, tmp_path) -> None:
    if kind == "ctranslate2":
        pytest.importorskip("ctranslate2")
    run = converged_rnn if family == "rnn" else trained_transformer
    sources, references = unseen_dates
    reference_bleu, reference_outputs = bleu(heed.load(str(run), device="cpu"), sources, references)
    assert reference_bleu > 40, "trained far from an untrained model (about 1), so the comparison means something"
    float_bleu, float_outputs = bleu(heed.load(str(export_model(run, tmp_path / "f32", kind=kind))), sources,
                                     references)
    assert float_outputs == reference_outputs and float_bleu == reference_bleu
    int8_bleu, _ = bleu(heed.load(str(export_model(run, tmp_path / "int8", kind=kind, int8=True))), sources,
                        references)
    assert int8_bleu >= reference_bleu - INT8_MARGIN, (int8_bleu, reference_bleu)
