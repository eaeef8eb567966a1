"""An imported model works wherever a heed model does: `heed attention` on every layer x head,
the ONNX and CTranslate2 exports (float32 and int8), ensembles of compatible models, and the
server's look-inside endpoints. On a tiny random Marian model and a tiny random M2M-100 model
(tests/pretrained_models.py), imported by heed.pretrained."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from tests.pretrained_models import make_m2m100, make_marian, tatoeba, teacher_forced

import heed
from heed.pretrained import import_model

pytest.importorskip("transformers")

PAIR = {"src_lang": "fr", "tgt_lang": "en"}  # the M2M-100 model's
GREEDY = dict(beam=1, max_len_a=0, max_len_b=40, min_len=0)


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> dict[str, Path]:
    """{"marian": a swish Marian model with one table, "m2m100": an M2M-100 model, "marian-b": a
    second Marian model with the first's tokenizer and other weights}, each imported."""
    root = tmp_path_factory.mktemp("imported")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MarianTokenizer: "Recommended: pip install sacremoses."
        return {
            "marian": import_model(make_marian(root / "hf-marian"), root / "marian"),
            "marian-b": import_model(make_marian(root / "hf-marian-b", seed=1), root / "marian-b"),
            "m2m100": import_model(make_m2m100(root / "hf-m2m100"), root / "m2m100"),
        }


def _load(path: Path, name: str, **kw) -> heed.Translator:
    return heed.load(path, **kw, **(PAIR if name == "m2m100" else {}))


def sources(count: int = 40) -> list[str]:
    return list(tatoeba(5000, count)[0])


def step_log_probs(translator: heed.Translator, text: str, tokens: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probabilities (len(tokens) + 1, vocab) at each output position, reading `tokens`
    (teacher forcing), the last row predicting </s>; the ids they predict)."""
    _, _, [(src, tgt)] = translator.forced_pairs([text], [tokens], empty="nothing")
    return teacher_forced(translator, src, tgt)


# ---------------------------------------------------------------- heed attention --layer/--head/--grid


def test_attention_grid_draws_every_head_of_an_imported_model(imported, heed_cli, tmp_path):
    out = tmp_path / "grid.png"
    done = heed_cli("attention", str(imported["marian"]), "--grid", sources(1)[0], "-o", str(out),
                    "--beam", "1", "--max-len-b", "12", "--max-len-a", "0")
    assert done.exit_code == 0, done.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "attention heatmap:" in done.stdout


def test_attention_picks_the_layer_and_head_asked_for(imported, monkeypatch, heed_cli, tmp_path):
    """--layer 0 --head 3 draws that head's weights, as attention_layers gives them; --head 0,3 their mean."""
    import heed.viz

    drawn = []
    real = heed.viz.attention_grid
    monkeypatch.setattr(heed.viz, "attention_grid", lambda items, **kw: drawn.append((items, kw)) or real(items, **kw))
    text = sources(1)[0]
    translator = _load(imported["m2m100"], "m2m100")
    output = translator.translate([text], beam=1, max_len_a=0, max_len_b=12)[0]
    maps = translator.attention_layers([text], [output.tokens])[0]
    for head, expected in (("3", maps.cross[0, 3]), ("0,3", maps.cross[0, [0, 3]].mean(0))):
        done = heed_cli("attention", str(imported["m2m100"]), text, "--layer", "0", "--head", head, "-o",
                        str(tmp_path / "one.png"), "--beam", "1", "--max-len-b", "12", "--max-len-a", "0",
                        "--src-lang", "fr", "--tgt-lang", "en")
        assert done.exit_code == 0, done.output
        (src, tgt, weights), = drawn.pop()[0]
        assert (src, tgt) == output.labels()
        np.testing.assert_allclose(weights, expected, atol=1e-6)


@pytest.mark.parametrize("args, fragments", [
    (["--layer", "2"], ["--layer 2 does not exist", "2 decoder layers"]),
    (["--head", "4"], ["--head 4 does not exist", "4 heads"]),
    (["--grid", "--head", "1"], ["--grid draws every head"]),
    (["--grid", "--layer", "mean"], ["--grid draws each layer's heads"]),
    (["--layer", "x"], ["--layer must be"]),
])
def test_a_layer_or_head_the_model_lacks_is_one_line(imported, heed_cli, assert_user_error, tmp_path, args,
                                                     fragments):
    out = tmp_path / "a.png"
    done = heed_cli("attention", str(imported["marian"]), "bonjour", *args, "-o", str(out), "--beam", "1")
    assert_user_error(done, *fragments)
    assert not out.exists()


def test_grid_takes_one_sentence(imported, heed_cli, assert_user_error, tmp_path):
    done = heed_cli("attention", str(imported["marian"]), "un", "deux", "--grid", "-o", str(tmp_path / "a.png"))
    assert_user_error(done, "--grid draws every head of one sentence; got 2")


# ---------------------------------------------------------------- exports


@pytest.mark.parametrize("name", ["marian", "m2m100"])
@pytest.mark.parametrize("kind", ["onnx", "ctranslate2"])
def test_a_float32_export_of_an_imported_model_decodes_as_pytorch(imported, tmp_path, name, kind):
    """Greedy outputs and their log-probabilities equal the PyTorch model's, language token and all,
    and so do they with half of each output forced as a prefix (which counts in the score)."""
    if kind == "ctranslate2":
        pytest.importorskip("ctranslate2")
    from heed.export.onnx import export_model

    out = export_model(imported[name], tmp_path / kind, kind=kind)
    texts = sources()
    mine = _load(imported[name], name, device="cpu").translate(texts, **GREEDY)
    theirs = _load(out, name).translate(texts, **GREEDY)
    assert [t.tokens for t in theirs] == [t.tokens for t in mine]
    assert len({len(t.tokens) for t in mine}) >= 4  # outputs of many lengths, not all empty
    np.testing.assert_allclose([t.log_prob for t in theirs], [t.log_prob for t in mine], atol=1e-3)
    halves = [t.tokens[: len(t.tokens) // 2] for t in mine]
    forced = {n: _load(d, name, **kw).translate(texts, prefix=halves, **GREEDY)
              for n, d, kw in (("mine", imported[name], dict(device="cpu")), ("theirs", out, {}))}
    assert [t.tokens for t in forced["theirs"]] == [t.tokens for t in forced["mine"]]
    np.testing.assert_allclose([t.log_prob for t in forced["theirs"]], [t.log_prob for t in forced["mine"]], atol=1e-3)


@pytest.mark.parametrize("kind", ["onnx", "ctranslate2"])
def test_an_int8_export_of_an_imported_model_is_quantized_and_scores_near_float32(imported, tmp_path, kind):
    """Forced to read the float32 model's greedy outputs, the int8 export's log-probabilities stay
    near float32's: int8 products move scores a little, they do not change the model (that the
    weights are 8-bit is tests/export/test_export*.py's)."""
    if kind == "ctranslate2":
        pytest.importorskip("ctranslate2")
    from heed.export.onnx import export_model

    small = export_model(imported["marian"], tmp_path / "int8", kind=kind, int8=True)
    texts = sources()
    reference = _load(imported["marian"], "marian", device="cpu").translate(texts, **GREEDY)
    quantized = _load(small, "marian")
    drift = []
    for text, r in zip(texts, reference):
        if not r.tokens:
            continue
        forced = quantized.translate([text], prefix=[r.tokens], beam=1, max_len_a=0, max_len_b=len(r.tokens),
                                     min_len=0)[0]
        assert forced.tokens == r.tokens
        drift.append(abs(forced.log_prob - r.log_prob) / (len(r.tokens) + 1))
    assert np.mean(drift) < 0.1 and max(drift) < 0.5, (np.mean(drift), max(drift))


# ---------------------------------------------------------------- ensembles


def test_an_ensemble_of_an_imported_model_with_itself_is_that_model(imported):
    texts = sources()
    alone = _load(imported["m2m100"], "m2m100", device="cpu")
    twice = heed.load([imported["m2m100"]] * 2, device="cpu", **PAIR)
    for options in (GREEDY, dict(GREEDY, beam=4)):
        a, b = alone.translate(texts, **options), twice.translate(texts, **options)
        assert [t.tokens for t in b] == [t.tokens for t in a]
        np.testing.assert_allclose([t.log_prob for t in b], [t.log_prob for t in a], atol=1e-4)


def test_an_ensemble_of_two_imported_models_decodes_with_their_mean_log_probs(imported):
    """Each greedy token is the argmax of the members' mean log-probabilities, and the output's
    log-probability is the sum of that mean's log-softmax (heed.nn.ensemble)."""
    members = [_load(imported[n], n, device="cpu") for n in ("marian", "marian-b")]
    ensemble = heed.load([imported["marian"], imported["marian-b"]], device="cpu")
    outputs = ensemble.translate(sources(12), **GREEDY)
    assert any(0 < len(t.tokens) < GREEDY["max_len_b"] for t in outputs)
    for text, t in zip(sources(12), outputs):
        (first, ids), (second, _) = (step_log_probs(m, text, t.tokens) for m in members)
        mean = torch.stack([first, second]).mean(0).log_softmax(-1)
        at_limit = len(t.tokens) == GREEDY["max_len_b"]  # where heed forces </s>
        chosen = ids[:-1].tolist() if at_limit else ids.tolist()
        assert mean.argmax(-1).tolist()[: len(chosen)] == chosen
        assert t.log_prob == pytest.approx(mean.gather(1, ids[:, None]).sum().item(), abs=1e-4)


def test_models_of_different_vocabularies_make_no_ensemble(imported, heed_cli, assert_user_error):
    done = heed_cli("translate", str(imported["marian"]), str(imported["m2m100"]), input="bonjour\n")
    assert_user_error(done, str(imported["m2m100"]))


# ---------------------------------------------------------------- the server


def test_the_servers_heads_of_an_imported_model_are_attention_layers(imported):
    """/v1/heads gives every layer x head of the M2M-100 model for the pair the request names, as
    attention_layers does, the source's language token its first column (the model reads it)."""
    from heed.serve.app import create_app

    translator = heed.load(imported["m2m100"], device="cpu")
    paired = translator.with_languages("fr", "en")
    texts = sources(3)
    outputs = [t.tokens for t in paired.translate(texts, **GREEDY)]
    with TestClient(create_app({"m": translator})) as client:
        got = client.post("/v1/heads", json={"sources": texts, "targets": outputs, **PAIR})
        assert got.status_code == 200, got.text
        refused = client.post("/v1/heads", json={"sources": texts, "targets": outputs})
        assert refused.status_code == 422 and "src_lang" in refused.text
    for mine, served in zip(paired.attention_layers(texts, outputs), got.json()["results"]):
        assert np.shape(served["cross"]) == (2, 4, len(mine.tgt_tokens) + 1, len(mine.src_tokens) + 1)
        assert served["src_tokens"] == mine.src_tokens and mine.src_tokens[0] == "__fr__"
        np.testing.assert_allclose(served["cross"], mine.cross, atol=1e-5)
