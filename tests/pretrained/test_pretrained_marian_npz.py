"""Marian releases (OPUS-MT's zips: .npz weights, vocab.yml, source.spm, target.spm, decoder.yml)
imported by heed.nn.transformer.convert.marian_npz: the same model as the Hugging Face conversion
of the same weights, the same log-probabilities as CTranslate2's own reader of the release (post-
and pre-norm), the guided-alignment head recorded, and a broken release refused in one line.

The releases are written by the test (pretrained_models.write_release) in Marian's layout, from a tiny MarianMTModel
that transformers builds, or from random arrays."""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file
from tests.pretrained_models import (
    MARIAN_OPTIONS,
    make_marian,
    release_parts,
    tatoeba,
    write_release,
)

import heed
from heed.pretrained import import_model


def pre_norm(arrays: dict[str, np.ndarray], seed: int = 0) -> dict[str, np.ndarray]:
    """The same weights as a pre-norm model: every norm `_pre`, and random norms on top of both stacks."""
    rng = np.random.default_rng(seed)
    out = {(k + "_pre" if "_ln_" in k else k): v for k, v in arrays.items()}
    for stack in ("encoder", "decoder"):
        out[f"{stack}_top_ln_scale"] = (1 + 0.2 * rng.standard_normal((1, 32))).astype(np.float32)
        out[f"{stack}_top_ln_bias"] = (0.2 * rng.standard_normal((1, 32))).astype(np.float32)
    return out


@pytest.fixture(scope="module")
def hf_marian(tmp_path_factory):
    """(the Hugging Face directory, Marian's arrays of its weights, the vocabulary's pieces without <pad>)."""
    pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("npz")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_dir = make_marian(root / "hf")
    return (hf_dir, *release_parts(hf_dir))


@pytest.fixture(scope="module")
def release(hf_marian, tmp_path_factory) -> Path:
    hf_dir, arrays, pieces = hf_marian
    return write_release(tmp_path_factory.mktemp("release") / "opus-fr-en", arrays, MARIAN_OPTIONS, pieces, hf_dir)


def test_a_release_imports_as_the_hugging_face_conversion_of_its_weights(hf_marian, release, tmp_path):
    """The same weights, tensor for tensor, the same vocabulary, ids and special ids, so the same
    outputs; decoder.yml's beam size and normalize become the decode defaults."""
    hf_dir, _, _ = hf_marian
    from_npz = import_model(release, tmp_path / "npz")
    from_hf = import_model(hf_dir, tmp_path / "hf")
    a, b = load_file(str(from_npz / "model.safetensors")), load_file(str(from_hf / "model.safetensors"))
    assert a.keys() == b.keys()
    # <pad>, which a Marian model does not have, gets a logit bias that takes it out of the softmax
    # (transformers' conversion gives it 0, so its probabilities differ from Marian's a little)
    assert a["decoder.generator.bias"][-1] <= -1e4
    for state in (a, b):
        state["decoder.generator.bias"] = state["decoder.generator.bias"][:-1]
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=0, rtol=0, msg=name)
    assert (json.loads((from_npz / "src.vocab.json").read_text(encoding="utf-8")) ==
            json.loads((from_hf / "src.vocab.json").read_text(encoding="utf-8")))
    npz, hf = heed.load(from_npz), heed.load(from_hf)
    assert npz.model.bos_id == hf.model.bos_id == len(hf_marian[2])  # <pad>: decoding starts there
    assert (npz.decode_config.beam_size, npz.decode_config.length_penalty) == (4, 0.6)
    texts = list(tatoeba(5000, 30)[0])
    options = dict(beam=1, max_len_a=0, max_len_b=40, min_len=0)
    assert [t.tokens for t in npz.translate(texts, **options)] == [t.tokens for t in hf.translate(texts, **options)]
    meta = json.loads((from_npz / "heed.json").read_text())
    assert meta["pretrained"]["architecture"] == "Marian transformer (.npz)"
    assert meta["pretrained"]["weights"] == "model.npz"


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_log_probs_equal_ctranslate2s_own_reading_of_the_release(hf_marian, tmp_path, norm):
    """CTranslate2's OpusMTConverter reads the same release independently: its teacher-forced
    log-probabilities (summed per sentence) equal heed's to 1e-3, post-norm (OPUS-MT's) and pre-norm (Marian's other
    layout, with a norm on top of each stack)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from ctranslate2.converters import OpusMTConverter

    hf_dir, arrays, pieces = hf_marian
    options = dict(MARIAN_OPTIONS)
    if norm == "pre":
        arrays = pre_norm(arrays)
        options.update({"transformer-preprocess": "n", "transformer-postprocess": "da",
                        "transformer-postprocess-top": "n"})
    release = write_release(tmp_path / "release", arrays, options, pieces, hf_dir)
    OpusMTConverter(str(release)).convert(str(tmp_path / "ct2"))
    theirs = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    mine = heed.load(import_model(release, tmp_path / "heed"), device="cpu")
    texts = list(tatoeba(5000, 20)[0])
    outputs = mine.translate(texts, beam=1, max_len_a=0, max_len_b=20, min_len=1)
    src = [mine.codec.src_tokens(t) for t in texts]
    scored = theirs.score_batch(src, [t.tokens for t in outputs])
    for text, t, s in zip(texts, outputs, scored):
        forced = mine.translate([text], prefix=[t.tokens], beam=1, max_len_a=0, max_len_b=len(t.tokens), min_len=0)[0]
        assert forced.tokens == t.tokens
        assert forced.log_prob == pytest.approx(sum(s.log_probs), abs=1e-3)


def test_the_guided_alignment_head_is_recorded_and_heed_align_reads_it(release, tmp_path, heed_cli):
    """OPUS-MT's "transformer-align" models were trained to align with the first head of the last
    layer: heed.json records it, and `heed align` reads it by default (the same links as --layer 1
    --head 0)."""
    out = import_model(release, tmp_path / "m")
    assert json.loads((out / "heed.json").read_text())["alignment"] == {
        "method": "argmax", "layer": 1, "head": [0], "weights": "attention", "units": "words", "trained": True}
    fr, en = tatoeba(5000, 4)
    (tmp_path / "s").write_text("".join(s + "\n" for s in fr), encoding="utf-8")
    (tmp_path / "t").write_text("".join(s + "\n" for s in en), encoding="utf-8")
    default = heed_cli("align", str(out), "--src", str(tmp_path / "s"), "--tgt", str(tmp_path / "t"))
    explicit = heed_cli("align", str(out), "--src", str(tmp_path / "s"), "--tgt", str(tmp_path / "t"),
                        "--layer", "1", "--head", "0")
    assert default.exit_code == explicit.exit_code == 0, default.output
    assert default.stdout == explicit.stdout and len(default.stdout.splitlines()) == 4
    assert "reading: argmax, layer 1, mean of heads 0, the heads guided alignment trained" in default.stderr


def _broken(release: Path, tmp_path: Path, change) -> Path:
    broken = tmp_path / "broken"
    shutil.copytree(release, broken)
    change(broken)
    return broken


def _options(broken: Path, **changes) -> None:
    with np.load(broken / "model.npz") as f:
        arrays = {k: f[k] for k in f.files}
    options = {**yaml.safe_load(arrays.pop("special:model.yml").tobytes()[:-1]), **changes}
    text = yaml.safe_dump(options).encode() + b"\0"
    np.savez(broken / "model.npz", **arrays, **{"special:model.yml": np.frombuffer(text, dtype=np.int8)})


@pytest.mark.parametrize("change, fragments", [
    (lambda d: (d / "source.spm").unlink(), ["source.spm: missing", "source.spm and target.spm"]),
    (lambda d: (d / "model.npz").write_bytes((d / "model.npz").read_bytes()[:5000]), ["model.npz", "truncated"]),
    (lambda d: _options(d, **{"transformer-ffn-activation": "gelu"}), ["transformer-ffn-activation 'gelu'"]),
    (lambda d: _options(d, **{"dec-depth": 3}), ["enc-depth 2 and dec-depth 3 differ"]),
    (lambda d: (d / "vocab.yml").write_text("</s>: 0\n<unk>: 1\n", encoding="utf-8"), ["vocab.yml: 2 pieces"]),
    (lambda d: (d / "decoder.yml").write_text("models: [a.npz, b.npz]\nvocabs: [vocab.yml, vocab.yml]\n"),
     ["names 2 models"]),
], ids=["missing-spm", "truncated-npz", "gelu", "depths", "wrong-vocab", "ensemble"])
def test_a_broken_release_is_one_line_and_writes_nothing(release, tmp_path, heed_cli, assert_user_error, change,
                                                          fragments):
    broken = _broken(release, tmp_path, change)
    done = heed_cli("import", str(broken), "-o", str(tmp_path / "out"))
    assert_user_error(done, *fragments)
    assert not (tmp_path / "out").exists()


def test_heed_import_takes_a_release_without_decoder_yml(hf_marian, tmp_path, heed_cli):
    hf_dir, arrays, pieces = hf_marian
    release = write_release(tmp_path / "r", arrays, MARIAN_OPTIONS, pieces, hf_dir, decoder_yml=False)
    done = heed_cli("import", str(release), "-o", str(tmp_path / "out"))
    assert done.exit_code == 0, done.output
    translator = heed.load(tmp_path / "out")
    assert translator.translate(["Bonjour."], beam=1)[0].src_tokens[0].startswith("\u2581")
