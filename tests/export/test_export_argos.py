"""heed.export.argos: `heed export --format argos` writes an Argos Translate package that
argostranslate itself installs (into a temporary packages directory, never the user's) and
translates with to heed's own CTranslate2 export's output; a model Argos cannot hold is refused in
one line, exit 2, nothing written."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("ctranslate2")

from cli_helpers import assert_user_error, invoke

import heed
from heed.export.onnx import export_model

TRANSFORMER = {"family": "transformer", "layers": 1, "d_model": 32, "heads": 4, "ff_size": 64, "dropout": 0.0,
               "attention_dropout": 0.0}
UNIGRAM = {"kind": "unigram", "vocab_size": 80}


def _train(tiny_config, output: Path, *, shared: bool, epochs: int) -> Path:
    from heed.config import config_from_dict
    from heed.train import train

    raw = tiny_config(output, epochs=epochs, lr=0.01, log_every=1000,
                      schedule={"name": "warmup", "warmup_steps": 100, "decay": "none"})
    raw["data"] = {**raw["data"], "tokenizer": {"src": UNIGRAM, "tgt": UNIGRAM}, "shared_vocab": shared}
    raw["decode"] = {"max_len_b": 40, "max_len_a": 0.0}
    train(config_from_dict({**raw, "model": TRANSFORMER}))
    return output


@pytest.fixture(scope="module")
def spm_transformer(tiny_config, tmp_path_factory) -> Path:
    """A tiny Transformer on the dates with one unigram SentencePiece model for both sides."""
    return _train(tiny_config, tmp_path_factory.mktemp("argos-spm") / "out", shared=True, epochs=60)


@pytest.fixture(scope="module")
def package(spm_transformer, tmp_path_factory) -> Path:
    from heed.export.argos import export_argos

    return export_argos(spm_transformer, tmp_path_factory.mktemp("argos") / "en_fr", source_lang="en",
                        target_lang="fr")


def test_the_package_is_one_directory_with_argos_files(package):
    assert package.name == "en_fr.argosmodel"
    names = zipfile.ZipFile(package).namelist()
    assert {n.split("/")[0] for n in names} == {"translate-en_fr"}
    for required in ("metadata.json", "sentencepiece.model", "model/model.bin", "model/config.json",
                     "model/shared_vocabulary.json", "minisbd/heed.onnx"):
        assert f"translate-en_fr/{required}" in names
    metadata = json.loads(zipfile.ZipFile(package).read("translate-en_fr/metadata.json"))
    assert (metadata["from_code"], metadata["to_code"], metadata["type"]) == ("en", "fr", "translate")


ARGOS_SCRIPT = """
import json, sys
from pathlib import Path
import argostranslate.package, argostranslate.translate
argostranslate.package.install_from_path(Path(sys.argv[1]))
sources = json.loads(sys.stdin.read())
print(json.dumps([argostranslate.translate.translate(s, "en", "fr") for s in sources]))
"""


def test_argos_translates_as_heeds_ct2_export(package, spm_transformer, tiny_corpus, tmp_path):
    """argostranslate installs the package into a temporary packages directory and, greedy
    (ARGOS_BEAM_SIZE=1), its sentences split by the package's own MiniSBD model (Argos's default
    chunk type: nothing downloaded, no MiniSBD cache made), writes what heed.load of the CTranslate2
    export writes."""
    pytest.importorskip("argostranslate", reason="argostranslate is not installed (pip install 'heed-nmt[argos]')")
    # Argos translates sentence by sentence: "5 sept. 2021" is two sentences to the package's splitter
    # ("5 sept." and "2021"), so only sources it keeps whole are compared with heed's line-by-line output.
    sources = [s for s in tiny_corpus["test_src"].read_text(encoding="utf-8").splitlines() if "." not in s]
    assert len(sources) >= 10
    ct2 = heed.load(str(export_model(spm_transformer, tmp_path / "ct2", kind="ctranslate2")))
    expected = [t.text for t in ct2.translate(sources, beam=1)]
    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(home), "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config"),
           "XDG_CACHE_HOME": str(home / "cache"), "ARGOS_PACKAGES_DIR": str(tmp_path / "packages"),
           "ARGOS_BEAM_SIZE": "1", "ARGOS_DEVICE_TYPE": "cpu",
           "ARGOS_INTRA_THREADS": "1", "ARGOS_PACKAGE_INDEX": "http://127.0.0.1:9/"}
    done = subprocess.run([sys.executable, "-c", ARGOS_SCRIPT, str(package)], input=json.dumps(sources), env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == expected
    assert (tmp_path / "packages" / "translate-en_fr" / "metadata.json").is_file()
    minisbd_cache = home / "data" / "argos-translate" / "minisbd"  # where Argos has MiniSBD download models
    assert not minisbd_cache.exists() or not any(minisbd_cache.iterdir())


def test_the_packaged_splitter_ends_sentences_at_final_punctuation(tmp_path):
    """MiniSBD itself runs the package's splitter: . ! ? followed by a space end a sentence, a point
    inside a number does not, and a line without one is one sentence."""
    minisbd = pytest.importorskip("minisbd", reason="minisbd (argostranslate's) is not installed")
    from heed.export.argos_sbd import FILE, write_minisbd

    write_minisbd(tmp_path)
    split = minisbd.SBDetect(str(tmp_path / FILE), use_gpu=False).sentences
    assert split("Hello there. How are you? Fine!  It costs 3.14 euros.") == [
        "Hello there.", "How are you?", "Fine!", "It costs 3.14 euros."]
    assert split("VENDREDI 5 JUILLET 1912") == ["VENDREDI 5 JUILLET 1912"]
    assert split("5 sept. 2021") == ["5 sept.", "2021"]
    assert split("Wait... what？ 好。") == ["Wait...", "what？", "好。"]


def _refused(model: Path, out: Path, *fragments: str) -> None:
    """`heed export --format argos` of `model` exits 2 with one line naming `fragments`; nothing is
    left beside `out`, not even a temp file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    result = invoke("export", model, "-o", out, "--format", "argos", "--source-lang", "en", "--target-lang", "fr")
    assert_user_error(result, *fragments)
    assert list(out.parent.iterdir()) == []


def test_an_rnn_is_refused(trained_run, tmp_path):
    _refused(trained_run, tmp_path / "out" / "rnn", "CTranslate2 runs Transformers", "model.family")


def test_a_char_tokenizer_is_refused(converged_transformer, tmp_path):
    _refused(converged_transformer, tmp_path / "out" / "char", "one SentencePiece model", "is 'char'")


def test_separate_source_and_target_tokenizers_are_refused(tiny_config, tmp_path):
    model = _train(tiny_config, tmp_path / "run", shared=False, epochs=1)
    _refused(model, tmp_path / "out" / "two", "separate source and target tokenizers", "data.shared_vocab: true")


def test_a_missing_or_malformed_language_code_is_refused(spm_transformer, tmp_path):
    assert_user_error(invoke("export", spm_transformer, "-o", tmp_path / "x", "--format", "argos"), "--source-lang")
    assert_user_error(invoke("export", spm_transformer, "-o", tmp_path / "x", "--format", "argos", "--source-lang",
                             "English", "--target-lang", "fr"), "--source-lang 'English'", "ISO 639")
    assert list(tmp_path.iterdir()) == []
