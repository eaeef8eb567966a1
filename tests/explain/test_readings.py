"""The reading registry (heed.explain.readings) is the one place a reading is declared: a toy reading
registered here is a `heed explain` command, a /v1/explain route in the OpenAPI schema and a
Translator.explain name, runs end to end, and is refused in one line where the model is not what it
needs. Every registered reading gives the numbers of the path that existed before it."""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from pydantic import Field

from heed.api import Translator
from heed.errors import HeedError
from heed.explain.readings import READINGS, Options, PairSize, Reading, register, unregister
from heed.plumbing.limits import PairCost, forced_work
from heed.results import Labelled, ReadingResult

SOURCES = ["3 mars 1998", "le 12 juin 2004"]


class ToyOptions(Options):
    scale: float = Field(1.0, gt=0, le=10, description="what every share is multiplied by")


def toy_run(model: Any, codec: Any, device: Any, src_texts: Any, tgt_texts: Any, options: ToyOptions, *,
            max_src_len: int | None = None) -> list[ReadingResult]:
    """Each target row's mean over the heads and layers of the encoder's self-attention it would
    read... kept simple: the last encoder layer's head-mean self-attention of </s>, repeated per
    target row, times `scale` (a Transformer's: SelfAttentionModel.attention_maps)."""
    import torch

    from heed.explain.pairs import forced_pairs

    pairs = forced_pairs(codec, src_texts, tgt_texts, max_src_len=max_src_len, empty="nothing")
    out = []
    with torch.inference_mode():
        for group, batch in pairs.batches(model, device, 8):
            maps = model.attention_maps(batch.src, batch.src_lengths, batch.tgt_in)
            encoder = maps.encoder[-1].mean(1).cpu().numpy()  # (batch, src_len, src_len)
            for row, k in enumerate(group):
                s, t = pairs.sizes(k)
                matrix = np.repeat(encoder[row, s - 1:s, :s], t, axis=0) * options.scale
                out.append(ReadingResult("toy", pairs.src_tokens[k], pairs.tgt_tokens[k], ("target", "source"),
                                         matrix, {"row_sums": Labelled(("target",), matrix.sum(-1))}))
    return out


def toy_cost(size: PairSize, options: ToyOptions) -> PairCost:
    return PairCost(forced_work(size.tgt_len), 0, (size.tgt_len + 1) * (size.src_len + 2))


@pytest.fixture
def toy() -> Iterator[Reading]:
    reading = register(Reading("toy", "SelfAttentionModel", ToyOptions, toy_run, toy_cost,
                               "the encoder's last self-attention of </s>, a row per target token (a test's toy)"))
    try:
        yield reading
    finally:
        unregister("toy")


@pytest.fixture(scope="module")
def transformer(transformer_run: Any) -> Translator:
    return Translator.load(transformer_run, device="cpu")


@pytest.fixture(scope="module")
def rnn(trained_run: Any) -> Translator:
    return Translator.load(trained_run, device="cpu")


# ------------------------------------------------------------------------------ the toy, everywhere


def test_a_registered_reading_is_a_command_with_its_options_as_flags(toy, heed_cli):
    listed = heed_cli("explain", "--help")
    assert listed.exit_code == 0 and "The encoder's last self-attention of" in listed.stdout
    own = heed_cli("explain", "toy", "--help")
    assert own.exit_code == 0, own.output
    assert "--scale" in own.stdout and "what every share is multiplied by" in own.stdout.lower()


def test_a_registered_reading_is_a_route_with_its_options_in_the_openapi_schema(toy, rnn):
    from heed.serve.app import create_app

    schema = create_app({"r": rnn}).openapi()
    assert "/v1/explain/toy" in schema["paths"]
    request = schema["components"]["schemas"]["ExplainToyRequest"]
    assert {"model", "sources", "targets", "scale"} <= set(request["properties"])
    assert request["properties"]["scale"]["default"] == 1.0


def test_a_toy_reading_runs_end_to_end_in_python_the_cli_and_the_server(toy, transformer, transformer_run, heed_cli,
                                                                         tmp_path):
    from fastapi.testclient import TestClient

    from heed.serve.app import create_app

    targets = [t.tokens for t in transformer.translate(SOURCES)]
    python = transformer.explain("toy", SOURCES, targets, scale=2.0)
    assert [r.reading for r in python] == ["toy", "toy"]
    for r in python:
        assert r.values.shape == (len(r.tgt_tokens) + 1, len(r.src_tokens) + 1)
        np.testing.assert_allclose(r.values.sum(-1), 2.0, rtol=1e-5)  # a softmax row, doubled
        np.testing.assert_allclose(r.extra("row_sums"), r.values.sum(-1))
    own = transformer.explain("toy", SOURCES, scale=2.0)  # the model's own translations
    np.testing.assert_allclose(own[0].values, python[0].values)

    src, tgt, out = tmp_path / "s.txt", tmp_path / "t.txt", tmp_path / "out.json"
    src.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    tgt.write_text("".join(" ".join(t) + "\n" for t in targets), encoding="utf-8")
    ran = heed_cli("explain", "toy", transformer_run, "--src", src, "--scale", "2", "-o", out, "--device", "cpu")
    assert ran.exit_code == 0, ran.output
    written = json.loads(out.read_text(encoding="utf-8"))
    assert [w["dims"] for w in written] == [["target", "source"]] * 2
    np.testing.assert_allclose(written[1]["values"], python[1].values, atol=1e-6)

    with TestClient(create_app({"t": transformer})) as client:
        served = client.post("/v1/explain/toy", json={"sources": SOURCES, "targets": targets, "scale": 2.0})
    assert served.status_code == 200, served.text
    body = served.json()
    assert body["reading"] == "toy"
    np.testing.assert_allclose(body["results"][0]["values"], python[0].values, atol=1e-6)
    assert body["results"][0]["extras"]["row_sums"]["dims"] == ["target"]


def test_a_model_without_the_readings_protocol_is_refused_in_one_line_everywhere(toy, rnn, trained_run, heed_cli,
                                                                                 assert_user_error, tmp_path):
    from fastapi.testclient import TestClient

    from heed.serve.app import create_app

    with pytest.raises(HeedError) as caught:
        rnn.explain("toy", SOURCES)  # refused before the model decodes anything
    message = str(caught.value)
    assert "'toy'" in message and "SelfAttentionModel" in message and "\n" not in message

    src = tmp_path / "s.txt"
    src.write_text("3 mars 1998\n", encoding="utf-8")
    assert_user_error(heed_cli("explain", "toy", trained_run, "--src", src, "--device", "cpu"),
                      "the reading 'toy' needs a SelfAttentionModel")

    with TestClient(create_app({"r": rnn})) as client:
        refused = client.post("/v1/explain/toy", json={"sources": ["3 mars 1998"], "targets": ["1998-03-03"]})
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == "model"
    assert "the reading 'toy' needs a SelfAttentionModel" in refused.json()["error"]["message"]


def test_the_server_counts_a_readings_cost_by_its_own_cost_function(toy, transformer):
    from fastapi.testclient import TestClient

    from heed.serve.app import ServeSettings, create_app

    body = {"sources": SOURCES, "targets": ["1998-03-03", "2004-06-12"]}
    with TestClient(create_app({"t": transformer}, ServeSettings(max_answer=20))) as client:
        refused = client.post("/v1/explain/toy", json=body)
        unknown = client.post("/v1/explain/nope", json=body)
        bad = client.post("/v1/explain/toy", json={**body, "scale": 0})
    assert refused.status_code == 422, refused.text
    message = refused.json()["error"]["message"]
    assert "the reading toy" in message and "--max-answer" in message
    assert refused.json()["error"]["field"] == "sources"
    assert unknown.status_code == 404 and "toy" in unknown.json()["error"]["message"]
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "scale"


def test_a_readings_name_is_registered_once():
    with pytest.raises(ValueError, match="registered already"):
        register(READINGS["heads"])


def test_a_result_names_its_axes_in_order_and_labels_them():
    with pytest.raises(ValueError, match="in that order"):
        ReadingResult("x", ["a"], ["b"], ("source", "target"), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="labels"):
        ReadingResult("x", ["a"], ["b"], ("target", "source"), np.zeros((3, 2)))
    r = ReadingResult("x", ["a"], ["b"], ("target", "source"), np.zeros((2, 2)))
    assert r.labels("source") == ["a", "</s>"] and r.labels("prefix") == ["<s>", "b"]
    assert r.to_dict()["dims"] == ["target", "source"]


# ------------------------------------------------------------- every reading, as the old path gives it


def _own(translator: Translator) -> list[list[str]]:
    return [t.tokens for t in translator.translate(SOURCES)]


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_heads_reads_what_attention_layers_gives(family, request):
    translator = request.getfixturevalue(family)
    targets = _own(translator)
    for mine, old in zip(translator.explain("heads", SOURCES, targets), translator.attention_layers(SOURCES, targets)):
        assert mine.dims == ("layer", "head", "target", "source")
        assert (mine.src_tokens, mine.tgt_tokens) == (old.src_tokens, old.tgt_tokens)
        np.testing.assert_array_equal(mine.values, old.cross)


def test_value_norms_reads_what_the_aligner_weighs(transformer):
    from heed.explain.forced import forced_attention

    targets = ["1998-03-03", "2004-06-12"]
    old = dict(forced_attention(transformer.model, transformer.codec, SOURCES, targets, device=transformer.device,
                                batch_size=64, heads=True, weights="value_norm"))
    for k, mine in enumerate(transformer.explain("value_norms", SOURCES, targets)):
        np.testing.assert_allclose(mine.values[..., :-1], old[k].attention, rtol=1e-6)  # the aligner drops </s>


@pytest.mark.parametrize("method", ["alti", "rollout"])
def test_contributions_and_the_source_share_read_what_source_share_gives(method, transformer):
    targets = _own(transformer)
    old = transformer.source_share(SOURCES, targets, reading=method)
    through = transformer.explain(method, SOURCES, targets)
    share = transformer.explain("source_share", SOURCES, targets, method=method)
    for o, t, s in zip(old, through, share):
        assert t.dims == ("layer", "target", "source") and s.dims == ("target", "source")
        np.testing.assert_array_equal(t.values[-1], o.source)
        np.testing.assert_array_equal(t.extra("prefix")[-1], o.prefix)
        np.testing.assert_array_equal(s.values, o.source)
        np.testing.assert_array_equal(s.extra("per_token"), o.per_token)
    default = transformer.explain("source_share", SOURCES)  # the model's own translation, as source_share's default
    np.testing.assert_allclose(default[1].values, transformer.source_share(SOURCES)[1].source)


def test_the_logit_lens_reads_what_logit_lens_gives(transformer):
    targets = _own(transformer)
    for mine, old in zip(transformer.explain("logit_lens", SOURCES, targets, top=3),
                         transformer.logit_lens(SOURCES, targets, top=3)):
        np.testing.assert_array_equal(mine.values, old.target_probs)
        np.testing.assert_array_equal(mine.extra("top_probs"), old.top_probs)
        np.testing.assert_array_equal(mine.extra("target_ranks"), old.target_ranks)
        assert mine.extra("top_tokens").tolist() == old.top_tokens


@pytest.mark.parametrize("family", ["rnn", "transformer"])
@pytest.mark.parametrize("method", ["grad_x_input", "integrated_gradients"])
def test_attribution_reads_what_attribute_gives(family, method, request):
    pytest.importorskip("captum")
    translator = request.getfixturevalue(family)
    targets = _own(translator)
    mine = translator.explain("attribution", SOURCES, targets, method=method, steps=4)
    old = translator.attribute(SOURCES, targets, method=method, steps=4)
    for m, o in zip(mine, old):
        np.testing.assert_allclose(m.values, o.source, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(m.extra("prefix"), o.prefix, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(m.extra("log_probs"), o.log_probs, rtol=1e-6)
        np.testing.assert_allclose(m.extra("attention"), o.attention, rtol=1e-6)
        assert ("delta" in m.extras) == (o.delta is not None)


def test_every_registered_reading_is_checked_against_its_old_path_here():
    """A reading added to the registry gets its test beside these (or the toy's contract)."""
    assert set(READINGS) == {"heads", "value_norms", "rollout", "alti", "source_share", "logit_lens", "attribution",
                             "contrast", "alignment_layer"}  # alignment_layer: tests/nn/test_alignment_layer.py


def test_every_registered_reading_is_in_the_cli_and_the_openapi_schema(rnn, heed_cli):
    from heed.serve.app import create_app

    listed = heed_cli("explain", "--help").stdout
    paths = create_app({"r": rnn}).openapi()["paths"]
    for name in READINGS:
        assert name in listed and f"/v1/explain/{name}" in paths


def test_a_wrong_option_is_refused_in_one_line_naming_it_before_anything_is_decoded(rnn, transformer):
    with pytest.raises(HeedError, match=r"^logit_lens: top: Input should be less than or equal to 50$"):
        transformer.explain("logit_lens", SOURCES, top=51)
    with pytest.raises(HeedError, match=r"^heads: colour: Extra inputs are not permitted$"):
        rnn.explain("heads", SOURCES, colour="red")
    with pytest.raises(HeedError, match="no reading named 'nope'; readings: heads, "):
        rnn.explain("nope", SOURCES)


def test_a_contrast_with_the_output_itself_is_no_difference_and_attributes_nothing(rnn):
    pytest.importorskip("captum")
    targets = _own(rnn)
    same = rnn.explain("contrast", SOURCES, targets, contrasts=targets, method="grad_x_input")  # as tokens
    for r, tokens in zip(same, targets):
        assert r.dims == ("source",) and r.extra("contrast_tokens").tolist() == tokens
        assert float(r.extra("log_prob_output")) == float(r.extra("log_prob_contrast"))
        np.testing.assert_allclose(r.values, 0.0, atol=1e-6)


def test_contrast_takes_its_other_outputs_one_per_pair_in_python_the_cli_and_the_server(rnn, trained_run, heed_cli,
                                                                                         tmp_path):
    pytest.importorskip("captum")
    from fastapi.testclient import TestClient

    from heed.serve.app import create_app

    targets, others = ["1998-03-03", "2004-06-12"], ["1998-03-04", "2004-07-12"]
    python = rnn.explain("contrast", SOURCES, targets, contrasts=others, method="grad_x_input")
    assert [r.extra("contrast_tokens").tolist() for r in python] == [list(o) for o in others]
    with pytest.raises(HeedError, match="2 source sentences but 1 contrasts; give one per source"):
        rnn.explain("contrast", SOURCES, targets, contrasts=others[:1])

    src, tgt, out = tmp_path / "s.txt", tmp_path / "t.txt", tmp_path / "out.json"
    src.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    tgt.write_text("".join(t + "\n" for t in targets), encoding="utf-8")
    ran = heed_cli("explain", "contrast", trained_run, "--src", src, "--tgt", tgt, "--method", "grad_x_input",
                   "--contrasts", others[0], "--contrasts", others[1], "-o", out, "--device", "cpu")
    assert ran.exit_code == 0, ran.output
    written = json.loads(out.read_text(encoding="utf-8"))
    assert [w["extras"]["contrast_tokens"]["values"] for w in written] == [list(o) for o in others]
    np.testing.assert_allclose(written[1]["values"], python[1].values, atol=1e-6)

    with TestClient(create_app({"r": rnn})) as client:
        body = {"sources": SOURCES, "targets": targets, "contrasts": others, "method": "grad_x_input"}
        served = client.post("/v1/explain/contrast", json=body)
        short = client.post("/v1/explain/contrast", json={**body, "contrasts": others[:1]})
    assert served.status_code == 200, served.text
    np.testing.assert_allclose(served.json()["results"][1]["values"], python[1].values, atol=1e-6)
    assert short.status_code == 422 and short.json()["error"]["field"] == "contrasts"


def test_the_server_reads_the_models_own_translations_where_no_targets_are_given(transformer):
    from fastapi.testclient import TestClient

    from heed.serve.app import create_app

    with TestClient(create_app({"t": transformer})) as client:
        own = client.post("/v1/explain/logit_lens", json={"sources": SOURCES, "top": 2})
        given = client.post("/v1/explain/logit_lens", json={"sources": SOURCES, "targets": _own(transformer), "top": 2})
    assert own.status_code == 200, own.text
    assert own.json()["results"] == given.json()["results"]


def test_heads_gives_a_transformers_self_attention_as_extras_on_request(transformer):
    targets = _own(transformer)
    both = transformer.explain("heads", SOURCES, targets, self_attention=["encoder", "decoder"])
    for r in both:
        s, t = len(r.src_tokens) + 1, len(r.tgt_tokens) + 1
        assert r.extras["encoder"].dims == ("layer", "head", "source", "key")
        assert r.extra("encoder").shape[2:] == (s, s) and r.extra("decoder").shape[2:] == (t, t)
        np.testing.assert_allclose(r.extra("encoder").sum(-1), 1.0, rtol=1e-5)  # softmax rows
        assert np.allclose(np.triu(r.extra("decoder")[0, 0], k=1), 0)  # causal
    assert transformer.explain("heads", SOURCES, targets)[0].extras == {}
