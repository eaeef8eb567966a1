"""Fine-tuning (train.init / heed train --init): a tiny imported model trained further on a toy corpus
keeps its architecture, tokenizers and vocabularies, its dev loss falls, and the result loads back;
a config that contradicts the model it starts from is one line naming the field, with nothing written."""
from __future__ import annotations

import json
import warnings

import pytest
import yaml
from tests.pretrained_models import make_m2m100, make_marian, tatoeba
from typer.testing import CliRunner

import heed
from heed.cli import app
from heed.data.corpus import Pair
from heed.pretrained import import_model
from heed.train.dev import dev_batches, dev_loss

pytest.importorskip("transformers")
runner = CliRunner()
PAIR = {"marian": {}, "nllb": {"src_lang": "fra_Latn", "tgt_lang": "eng_Latn"}}


@pytest.fixture(scope="module", params=list(PAIR))
def base(request, tmp_path_factory):
    """(kind, an imported tiny model's directory)."""
    root = tmp_path_factory.mktemp(f"base-{request.param}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = make_marian(root / "hf") if request.param == "marian" else make_m2m100(root / "hf", "nllb")
    return request.param, import_model(hf, root / "imported")


def write_config(tmp_path, kind: str, init, **sections) -> tuple:
    fr, en = tatoeba(0, 360)
    for name, rows in (("train", range(300)), ("dev", range(300, 360))):
        (tmp_path / f"{name}.fr").write_text("".join(fr[i] + "\n" for i in rows), encoding="utf-8")
        (tmp_path / f"{name}.en").write_text("".join(en[i] + "\n" for i in rows), encoding="utf-8")
    data = {"train": {"src": "train.fr", "tgt": "train.en"}, "dev": {"src": "dev.fr", "tgt": "dev.en"},
            "batch_tokens": 1500, **PAIR[kind], **sections.pop("data", {})}
    config = {"data": data, "train": {"init": str(init), "epochs": 1000, "max_steps": 40, "eval_every": 20, "lr": 3e-3,
                                      "label_smoothing": 0.0, "device": "cpu", **sections.pop("train", {})},
              "decode": {"beam_size": 1, "max_len_a": 0.0, "max_len_b": 20}, "output_dir": "run", **sections}
    path = tmp_path / "fine.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path, tmp_path / "run"


def test_fine_tuning_lowers_dev_loss_and_keeps_the_tokenizers(base, tmp_path):
    kind, imported = base
    path, run = write_config(tmp_path, kind, imported, model={"dropout": 0.0})
    done = runner.invoke(app, ["train", str(path), "--no-progress"])
    assert done.exit_code == 0, done.output
    evals = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [e["loss"] for e in evals if e["kind"] == "dev"]
    start = heed.load(imported, **PAIR[kind])
    fr, en = tatoeba(300, 60)
    examples = start.codec.encode_pairs([Pair(s, t) for s, t in zip(fr, en)])
    before = dev_loss(start.model, dev_batches(examples, start.config.data, start.codec.tgt_vocab.specials))
    assert len(losses) == 2 and before > losses[0] > losses[-1]
    for name in ("tokenizers.json", "src.vocab.json", "tgt.vocab.json"):
        assert (run / "model" / name).read_bytes() == (imported / name).read_bytes(), name
    tuned = heed.load(run / "model")
    assert tuned.config.model.model_dump(exclude={"dropout"}) == start.config.model.model_dump(exclude={"dropout"})
    assert tuned.config.data.src_lang == PAIR[kind].get("src_lang")
    fr = list(tatoeba(300, 20)[0])
    assert [t.src_tokens for t in tuned.translate(fr)] == [t.src_tokens for t in start.translate(fr)]


@pytest.mark.parametrize("setting, field", [
    ({"model": {"d_model": 64}}, "model.d_model"),
    ({"data": {"tokenizer": {"src": {"kind": "bpe"}, "tgt": {"kind": "bpe"}}}}, "data.tokenizer"),
    ({"data": {"shared_vocab": False}}, None),
])
def test_a_config_that_contradicts_the_init_model_is_refused(base, tmp_path, setting, field):
    kind, imported = base
    path, run = write_config(tmp_path, kind, imported, **setting)
    refused = runner.invoke(app, ["train", str(path), "--no-progress"])
    if field is None:  # the same as the model's where it shares one vocabulary: refused only where it differs
        shared = heed.load(imported, **PAIR[kind]).config.data.shared_vocab
        if not shared:
            assert refused.exit_code == 0, refused.output
            return
        field = "data.shared_vocab"
    assert refused.exit_code == 2, refused.output
    assert f"field '{field}'" in refused.output and len(refused.output.strip().splitlines()) == 1
    assert not run.exists()


def test_init_of_another_vocabulary_or_no_model_is_one_line(base, tmp_path):
    kind, imported = base
    path, run = write_config(tmp_path, kind, tmp_path / "nowhere")
    refused = runner.invoke(app, ["train", str(path), "--no-progress"])
    assert refused.exit_code == 2 and "field 'train.init'" in refused.output and not run.exists()
    # --init overrides train.init; a model whose languages the config's pair does not name is refused
    other = "marian" if kind == "nllb" else "nllb"
    path, run = write_config(tmp_path, other, tmp_path / "nowhere")
    refused = runner.invoke(app, ["train", str(path), "--init", str(imported), "--no-progress"])
    assert refused.exit_code == 2 and not run.exists(), refused.output
    assert len(refused.output.strip().splitlines()) == 1
