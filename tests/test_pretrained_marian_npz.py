"""Marian releases (OPUS-MT's zips: .npz weights, vocab.yml, source.spm, target.spm, decoder.yml)
imported by heed.nn.transformer.convert.marian_npz: the same model as the Hugging Face conversion
of the same weights, the same log-probabilities as CTranslate2's own reader of the release (post-
and pre-norm), the guided-alignment head recorded, and a broken release refused in one line.

The releases are written by the test (write_release) in Marian's layout, from a tiny MarianMTModel
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
from tests.pretrained_models import make_marian, tatoeba

import heed
from heed.pretrained import import_model

OPTIONS = {
    "type": "transformer", "enc-depth": 2, "dec-depth": 2, "dim-emb": 32, "transformer-heads": 4,
    "transformer-dim-ffn": 64, "transformer-ffn-depth": 2, "transformer-ffn-activation": "swish",
    "transformer-preprocess": "", "transformer-postprocess": "dan", "transformer-postprocess-emb": "d",
    "transformer-postprocess-top": "", "transformer-decoder-autoreg": "self-attention",
    "transformer-no-projection": False, "tied-embeddings-all": True, "transformer-dropout": 0.1,
    "guided-alignment": "corpus.align", "transformer-guided-alignment-layer": "last",
}


def write_release(directory: Path, arrays: dict[str, np.ndarray], options: dict, pieces: list[str],
                  spm: Path, *, decoder_yml: bool = True) -> Path:
    """A Marian release in `directory`: model.npz (the arrays and "special:model.yml", a
    NUL-terminated YAML string as Marian writes it), vocab.yml {piece: id}, source.spm and
    target.spm (copied from `spm`'s directory) and decoder.yml."""
    directory.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(options, sort_keys=False).encode() + b"\0"
    np.savez(directory / "model.npz", **arrays, **{"special:model.yml": np.frombuffer(text, dtype=np.int8)})
    (directory / "vocab.yml").write_text(yaml.safe_dump({p: i for i, p in enumerate(pieces)}, allow_unicode=True,
                                                        sort_keys=False), encoding="utf-8")
    for name in ("source.spm", "target.spm"):
        shutil.copy(spm / name, directory / name)
    if decoder_yml:
        (directory / "decoder.yml").write_text(yaml.safe_dump({
            "models": ["model.npz"], "vocabs": ["vocab.yml", "vocab.yml"], "beam-size": 4, "normalize": 0.6,
            "word-penalty": 0, "relative-paths": True}), encoding="utf-8")
    return directory


def marian_arrays(hf_state: dict[str, torch.Tensor], layers: int) -> dict[str, np.ndarray]:
    """A MarianMTModel's state dict (one table, <pad> its last row) in Marian's names and layout."""
    a = {k: v.detach().float().numpy() for k, v in hf_state.items()}
    out = {"Wemb": a["model.shared.weight"][:-1], "decoder_ff_logit_out_b": a["final_logits_bias"][:, :-1]}
    for stack in ("encoder", "decoder"):
        for i in range(layers):
            s, m = f"model.{stack}.layers.{i}", f"{stack}_l{i + 1}"
            parts = [("self_attn", "self", "self_attn_layer_norm")]
            if stack == "decoder":
                parts.append(("encoder_attn", "context", "encoder_attn_layer_norm"))
            for hf, marian, norm in parts:
                for p in "qkv":
                    out[f"{m}_{marian}_W{p}"] = a[f"{s}.{hf}.{p}_proj.weight"].T
                    out[f"{m}_{marian}_b{p}"] = a[f"{s}.{hf}.{p}_proj.bias"][None]
                out[f"{m}_{marian}_Wo"] = a[f"{s}.{hf}.out_proj.weight"].T
                out[f"{m}_{marian}_bo"] = a[f"{s}.{hf}.out_proj.bias"][None]
                out[f"{m}_{marian}_Wo_ln_scale"] = a[f"{s}.{norm}.weight"][None]
                out[f"{m}_{marian}_Wo_ln_bias"] = a[f"{s}.{norm}.bias"][None]
            for k in "12":
                out[f"{m}_ffn_W{k}"] = a[f"{s}.fc{k}.weight"].T
                out[f"{m}_ffn_b{k}"] = a[f"{s}.fc{k}.bias"][None]
            out[f"{m}_ffn_ffn_ln_scale"] = a[f"{s}.final_layer_norm.weight"][None]
            out[f"{m}_ffn_ffn_ln_bias"] = a[f"{s}.final_layer_norm.bias"][None]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


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
    vocab = json.loads((hf_dir / "vocab.json").read_text(encoding="utf-8"))
    pieces = sorted(vocab, key=vocab.get)
    assert pieces[-1] == "<pad>"
    return hf_dir, marian_arrays(load_file(str(hf_dir / "model.safetensors")), 2), pieces[:-1]


@pytest.fixture(scope="module")
def release(hf_marian, tmp_path_factory) -> Path:
    hf_dir, arrays, pieces = hf_marian
    return write_release(tmp_path_factory.mktemp("release") / "opus-fr-en", arrays, OPTIONS, pieces, hf_dir)


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
    a["decoder.generator.bias"], b["decoder.generator.bias"] = a["decoder.generator.bias"][:-1], b["decoder.generator.bias"][:-1]
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
    assert meta["pretrained"]["architecture"] == "Marian transformer (.npz)" and meta["pretrained"]["weights"] == "model.npz"


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_log_probs_equal_ctranslate2s_own_reading_of_the_release(hf_marian, tmp_path, norm):
    """CTranslate2's OpusMTConverter reads the same release independently: its teacher-forced
    log-probabilities (summed per sentence) equal heed's to 1e-3, post-norm (OPUS-MT's) and pre-norm (Marian's other
    layout, with a norm on top of each stack)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from ctranslate2.converters import OpusMTConverter

    hf_dir, arrays, pieces = hf_marian
    options = dict(OPTIONS)
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
    release = write_release(tmp_path / "r", arrays, OPTIONS, pieces, hf_dir, decoder_yml=False)
    done = heed_cli("import", str(release), "-o", str(tmp_path / "out"))
    assert done.exit_code == 0, done.output
    translator = heed.load(tmp_path / "out")
    assert translator.translate(["Bonjour."], beam=1)[0].src_tokens[0].startswith("\u2581")
