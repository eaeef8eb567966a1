"""The server's look-inside endpoints: every head of every layer (/v1/heads), attribution
(/v1/attribute), and decoding with intervened attention (/v1/translate's intervention); each
refused in one 4xx naming the field where the model cannot give it."""
import numpy as np
import pytest
from fastapi.testclient import TestClient

from heed.api import Translator
from heed.nn.intervention import Intervention
from heed.serve.app import create_app

SOURCES = ["3 mars 1998", "le 12 juin 2004"]


@pytest.fixture(scope="module")
def exported_dir(trained_run, tmp_path_factory):
    from heed.export.onnx import export_model

    return export_model(trained_run, tmp_path_factory.mktemp("export") / "onnx")


def test_heads_gives_every_layer_and_head_and_self_attention_on_request(transformer_run):
    translator = Translator.load(transformer_run, device="cpu")
    layers, heads = translator.model.head_grid
    outputs = [t.tokens for t in translator.translate(SOURCES)]
    with TestClient(create_app({"t": translator})) as client:
        small = client.post("/v1/heads", json={"sources": SOURCES, "targets": outputs}).json()["results"]
        full = client.post("/v1/heads", json={"sources": SOURCES, "targets": outputs,
                                              "parts": ["cross", "encoder", "decoder"]}).json()["results"]
    python = translator.attention_layers(SOURCES, outputs, parts=("cross", "encoder", "decoder"))
    for k, (mine, served, served_full) in enumerate(zip(python, small, full)):
        s, t = len(mine.src_tokens) + 1, len(mine.tgt_tokens) + 1
        assert np.shape(served["cross"]) == (layers, heads, t, s) and served["encoder"] is None
        np.testing.assert_allclose(served["cross"], mine.cross, atol=1e-6)
        np.testing.assert_allclose(served_full["encoder"], mine.encoder, atol=1e-6)
        np.testing.assert_allclose(served_full["decoder"], mine.decoder, atol=1e-6)
        assert np.shape(served_full["decoder"]) == (layers, heads, t, t)
        assert np.triu(np.asarray(served_full["decoder"]), 1).max() == 0  # causal
        # the last layer's head mean is the attention a translation reports
        reported = translator.translate([SOURCES[k]])[0].attention
        np.testing.assert_allclose(mine.cross[-1].mean(0), reported, atol=1e-5)


def test_an_rnn_has_one_cross_attention_and_no_self_attention(trained_run):
    translator = Translator.load(trained_run, device="cpu")
    maps = translator.attention_layers(SOURCES[:1], ["1998-03-03"], parts=("cross", "encoder", "decoder"))[0]
    assert maps.cross.shape[:2] == (1, 1) and maps.encoder is None and maps.decoder is None


def test_translate_with_an_intervention_decodes_as_python_does(converged_transformer):
    # a model that has learnt to read its source: a barely trained one writes the same whatever it attends to
    translator = Translator.load(converged_transformer, device="cpu")
    with translator.intervening(Intervention("permute", seed=2)):
        expected = [t.text for t in translator.translate(SOURCES, beam=1)]
    plain = [t.text for t in translator.translate(SOURCES, beam=1)]
    with TestClient(create_app({"m": translator})) as client:
        body = {"sentences": SOURCES, "beam_size": 1}
        permuted = client.post("/v1/translate", json={**body, "intervention": "permute", "intervention_seed": 2})
        again = client.post("/v1/translate", json=body)
    assert [r["hypotheses"][0]["text"] for r in permuted.json()["results"]] == expected
    assert [r["hypotheses"][0]["text"] for r in again.json()["results"]] == plain  # nothing leaks out of the batch
    assert expected != plain


def test_what_an_export_cannot_give_is_a_4xx_naming_the_field(exported_dir, heed_cli, assert_user_error, tmp_path):
    translator = Translator.load(exported_dir)
    with TestClient(create_app({"x": translator})) as client:
        for path, body, field in (
                ("/v1/attribute", {"sentences": SOURCES}, "model"),
                ("/v1/heads", {"sources": SOURCES, "targets": SOURCES}, "model"),
                ("/v1/translate", {"sentences": SOURCES, "intervention": "uniform"}, "intervention")):
            response = client.post(path, json=body)
            assert response.status_code == 422, response.text
            assert response.json()["error"]["field"] == field
    src = tmp_path / "src.txt"
    src.write_text("3 mars 1998\n", encoding="utf-8")
    out = tmp_path / "attr.json"
    result = heed_cli("attribute", exported_dir, "--src", src, "--output", out)
    assert_user_error(result, "the reading 'attribution' needs", "not an ensemble or an exported model")
    assert not out.exists()


@pytest.mark.parametrize("path, sources", [("/v1/heads", "sources"), ("/v1/attribute", "sentences")])
def test_target_tokens_the_model_does_not_know_are_refused_naming_the_target(transformer_run, path, sources):
    translator = Translator.load(transformer_run, device="cpu")
    own = [t.tokens for t in translator.translate(SOURCES)]
    with TestClient(create_app({"t": translator})) as client:
        for bad in (["<pad>", "1"], ["1", "no-such-token"], ["</s>"]):
            response = client.post(path, json={sources: SOURCES, "targets": [own[0], bad]})
            assert response.status_code == 422, response.text
            error = response.json()["error"]
            assert error["field"] == "targets[1]" and "not a token of the model's target vocabulary" in error["message"]
        assert client.post(path, json={sources: SOURCES, "targets": own}).status_code == 200
        assert client.post(path, json={sources: SOURCES, "targets": [own[0], ["<unk>", "1"]]}).status_code == 200


def test_bad_attribution_requests_name_their_field(trained_run):
    translator = Translator.load(trained_run, device="cpu")
    with TestClient(create_app({"m": translator})) as client:
        for body, field in (({"sentences": SOURCES, "targets": ["1998-03-03"]}, "targets"),
                            ({"sentences": SOURCES, "steps": 10_000}, "steps"),
                            ({"sentences": SOURCES, "method": "saliency"}, "method"),
                            ({"sentences": [" "]}, "sentences[0]")):
            response = client.post("/v1/attribute", json=body)
            assert response.status_code == 422, response.text
            assert response.json()["error"]["field"] == field


def test_heads_is_bounded_by_the_weights_it_would_return(transformer_run):
    from heed.serve.app import ServeSettings

    translator = Translator.load(transformer_run, device="cpu")
    layers, heads = translator.model.head_grid
    own = [t.tokens for t in translator.translate(SOURCES)]
    src = [len(translator.codec.src_tokens(s)) + 1 for s in SOURCES]
    tgt = [len(t) + 1 for t in own]
    cross = sum(layers * heads * t * s for s, t in zip(src, tgt))
    everything = cross + sum(layers * heads * (s * s + t * t) for s, t in zip(src, tgt))
    with TestClient(create_app({"t": translator}, ServeSettings(max_weights=cross))) as client:
        assert client.post("/v1/heads", json={"sources": SOURCES, "targets": own}).status_code == 200
        response = client.post("/v1/heads", json={"sources": SOURCES, "targets": own,
                                                  "parts": ["cross", "encoder", "decoder"]})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "sources" and f"{everything:,} attention weights" in error["message"]
    assert "--max-weights" in error["message"]


@pytest.mark.parametrize("task", ["heads", "attribute"])
def test_heads_and_attribution_stop_between_sentences_once_no_one_waits(trained_run, task):
    from heed.errors import Abandoned
    from heed.serve.app import _Key, _run_batch

    translator = Translator.load(trained_run, device="cpu")
    items = [(s, "1998-03-03", {}) for s in SOURCES * 3]
    asked = []

    def abandoned() -> bool:  # every request of the batch timed out after the first sentence
        asked.append(True)
        return len(asked) > 1

    from heed.explain.readings import AttributionOptions, HeadsOptions

    key = (_Key("m", "explain", read="heads", options=HeadsOptions(), shown="heads") if task == "heads" else
           _Key("m", "explain", read="attribution", options=AttributionOptions(method="grad_x_input", steps=1),
                shown="attribution"))
    with pytest.raises(Abandoned):
        _run_batch({"m": translator}, key, items, abandoned)
    assert len(asked) == 2  # one sentence done, then it stopped: not all six
    done = _run_batch({"m": translator}, key, items, lambda: False)
    assert len(done) == len(items)


def test_source_share_alignment_readings_and_the_lens_are_served_as_python_gives_them(transformer_run):
    """/v1/translate with explain source_share, /v1/align with a reading and /v1/lens give what
    Translator.source_share, Translator.align and Translator.logit_lens give."""
    from heed.explain.align_methods import AlignOptions

    translator = Translator.load(transformer_run, device="cpu")
    with TestClient(create_app({"t": translator})) as client:
        info = client.get("/v1/models").json()["models"][0]
        translated = client.post("/v1/translate", json={"sentences": SOURCES, "explain": ["source_share"],
                                                        "beam_size": 2, "n_best": 2}).json()["results"]
        aligned = {weights: client.post("/v1/align", json={"sources": SOURCES, "targets": ["1998-03-03", "2004-06-12"],
                                                           "weights": weights, "method": "shift", "layer": 0}).json()
                   for weights in ("alti", "rollout", "value_norm")}
        tokens = [r["hypotheses"][0]["tokens"] for r in translated]
        lensed = client.post("/v1/lens", json={"sources": SOURCES, "targets": tokens, "top": 2}).json()["results"]
    assert info["gives"]["contributions"] is True
    for source, result in zip(SOURCES, translated):
        for hypothesis in result["hypotheses"]:
            (share,) = translator.source_share([source], [hypothesis["tokens"]])
            assert hypothesis["source_share"]["per_token"] == pytest.approx(share.per_token.tolist(), abs=1e-6)
            assert hypothesis["source_share"]["sentence"] == pytest.approx(share.sentence, abs=1e-6)
    for weights, served in aligned.items():
        python = translator.align(SOURCES, ["1998-03-03", "2004-06-12"],
                                  options=AlignOptions(method="shift", layer=0, weights=weights))
        for mine, theirs in zip(python, served["results"]):
            np.testing.assert_allclose(theirs["attention"], mine.attention, atol=1e-6)
            assert [tuple(link) for link in theirs["links"]] == mine.links
    for mine, theirs in zip(translator.logit_lens(SOURCES, tokens, top=2), lensed):
        assert theirs["top_tokens"] == mine.top_tokens
        np.testing.assert_allclose(theirs["target_probs"], mine.target_probs, atol=1e-6)


def test_readings_a_model_cannot_give_are_refused_naming_the_field(trained_run):
    translator = Translator.load(trained_run, device="cpu")
    with TestClient(create_app({"r": translator})) as client:
        shared = client.post("/v1/translate", json={"sentences": SOURCES, "explain": ["source_share"]})
        lens = client.post("/v1/lens", json={"sources": SOURCES[:1], "targets": ["1998-03-03"]})
        alti = client.post("/v1/align", json={"sources": SOURCES[:1], "targets": ["1998-03-03"], "weights": "alti"})
        unknown = client.post("/v1/align", json={"sources": SOURCES[:1], "targets": ["1998-03-03"], "weights": "x"})
        info = client.get("/v1/models").json()["models"][0]
    assert shared.status_code == 422 and shared.json()["error"]["field"] == "explain"
    assert lens.status_code == 422 and lens.json()["error"]["field"] == "model"
    assert alti.status_code == 422 and "ALTI+" in alti.json()["error"]["message"]
    assert unknown.status_code == 422 and info["gives"]["contributions"] is False
