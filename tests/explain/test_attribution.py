"""Attribution beside attention (heed.explain.attribution; Captum): integrated gradients are complete,
gradient x input is the directional derivative a finite difference measures in float64, and the
CLI, the Python API and the server give the same numbers."""
import json

import numpy as np
import pytest
import torch

from heed.data.batching import collate
from heed.explain.attribution import EmbeddingSwap, attribute_ids, ranks, spearman

pytest.importorskip("captum")

SOURCES = ["3 mars 1998", "le 12 juin 2004"]


def _translator(run, dtype=torch.float32):
    from heed.api import Translator

    translator = Translator.load(run, device="cpu")
    translator.model.to(dtype)
    return translator


def _log_probs(model, src_ids, tgt_ids, replace=None):
    """(T+1,) log-probabilities of the pair's output tokens, the embeddings replaced by `replace`."""
    batch = collate([(src_ids, tgt_ids)], [0])
    swap = EmbeddingSwap(model)
    with torch.no_grad(), swap.run(replace) as read:
        logits = model(batch.src, batch.src_lengths, batch.tgt_in, need_attention=False).logits
    return torch.log_softmax(logits, -1)[0].gather(-1, batch.tgt_out[0, :, None])[:, 0], read


def _ids(translator, source):
    out = translator.translate([source])[0]
    src_tokens = translator.codec.src_tokens(source)
    return translator.codec.src_ids(src_tokens), translator.codec.target_vocab(src_tokens).encode(out.tokens)


def test_spearman_ranks_ties_by_their_mean_and_a_constant_row_is_zero():
    assert ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [3.5, 1.0, 3.5, 2.0]
    assert spearman(np.array([1, 2, 3]), np.array([10, 20, 30])) == pytest.approx(1.0)
    assert spearman(np.array([1, 2, 3]), np.array([3, 2, 1])) == pytest.approx(-1.0)
    assert spearman(np.array([1, 2, 3]), np.array([5, 5, 5])) == 0.0


@pytest.mark.parametrize("run_name", ["trained_run", "transformer_run"])
def test_integrated_gradients_sum_to_the_change_from_the_baseline(run_name, request):
    """Completeness (Sundararajan et al. 2017): per output token, the attributions of every source
    and decoder-input token sum to f(input) - f(zero embeddings), f computed here without Captum;
    tolerance 1% of that change + 1e-3 with 200 Gauss-Legendre points, float64."""
    translator = _translator(request.getfixturevalue(run_name), torch.float64)
    model = translator.model
    for source in SOURCES:
        src_ids, tgt_ids = _ids(translator, source)
        src_part, prefix, scores, delta, _ = attribute_ids(model, src_ids, tgt_ids, method="integrated_gradients",
                                                           steps=200, device=torch.device("cpu"))
        f_input, read = _log_probs(model, src_ids, tgt_ids)
        zeros = (torch.zeros_like(read["source"]), torch.zeros_like(read["target"]))
        f_baseline, _ = _log_probs(model, src_ids, tgt_ids, zeros)
        change = (f_input - f_baseline).numpy()
        totals = src_part.sum(1) + prefix.sum(1)
        np.testing.assert_allclose(scores, f_input.numpy(), rtol=1e-9)
        assert np.all(np.abs(totals - change) <= 0.01 * np.abs(change) + 1e-3), (totals, change)
        np.testing.assert_allclose(delta, totals - change, atol=1e-6)
        assert np.triu(prefix, 1).max() == 0 == np.triu(prefix, 1).min()  # no output token reads the future
        assert np.abs(change).max() > 0.1  # the check is not vacuous


@pytest.mark.parametrize("run_name", ["trained_run", "transformer_run"])
def test_gradient_x_input_is_the_finite_difference_along_each_embedding(run_name, request):
    """a_i = e_i . df/de_i = d/dt f(e_i (1 + t)) at t = 0: a central difference (h = 1e-6) in
    float64 gives every source and decoder-input token's attribution to every output token."""
    translator = _translator(request.getfixturevalue(run_name), torch.float64)
    model = translator.model
    src_ids, tgt_ids = _ids(translator, SOURCES[1])
    src_part, prefix, _, delta, _ = attribute_ids(model, src_ids, tgt_ids, method="grad_x_input", steps=1,
                                                  device=torch.device("cpu"))
    assert delta is None
    _, read = _log_probs(model, src_ids, tgt_ids)
    h = 1e-6
    for side, expected in ((0, src_part), (1, prefix)):
        for i in range(read["source" if side == 0 else "target"].size(1)):
            moved = []
            for sign in (1, -1):
                point = [read["source"].clone(), read["target"].clone()]
                point[side][:, i] *= 1 + sign * h
                moved.append(_log_probs(model, src_ids, tgt_ids, tuple(point))[0])
            numeric = ((moved[0] - moved[1]) / (2 * h)).numpy()
            np.testing.assert_allclose(expected[:, i], numeric, rtol=1e-5, atol=1e-7)
    assert np.abs(src_part).max() > 1e-3


def test_a_shared_embedding_table_is_read_for_the_source_first():
    """With share_embeddings one table embeds both sides: the swap still tells them apart, and
    integrated gradients stay complete."""
    from tiny_models import TRANSFORMER

    from heed.nn.model_config import ModelConfig
    from heed.nn.transformer.model import build_transformer

    torch.manual_seed(0)
    cfg = ModelConfig.model_validate({**TRANSFORMER, "share_embeddings": True, "dropout": 0.0,
                                      "attention_dropout": 0.0})
    model = build_transformer(cfg, src_vocab_size=20, tgt_vocab_size=20).double().eval()
    src_table, tgt_table = model.token_embeddings()
    assert src_table is tgt_table
    src_ids, tgt_ids = [5, 6, 7, 8], [9, 10, 11]
    src_part, _prefix, _, delta, _ = attribute_ids(model, src_ids, tgt_ids, method="integrated_gradients", steps=100,
                                                  device=torch.device("cpu"))
    _, read = _log_probs(model, src_ids, tgt_ids)
    assert read["source"].shape == (1, 5, 16) and read["target"].shape == (1, 4, 16)
    assert np.abs(delta).max() < 1e-3 and np.abs(src_part).max() > 1e-4


def test_cli_python_and_server_give_the_same_attributions(trained_run, tmp_path, heed_cli):
    from fastapi.testclient import TestClient

    from heed.serve.app import create_app

    translator = _translator(trained_run)
    python = [a.to_dict() for a in translator.attribute(SOURCES, steps=16)]
    src = tmp_path / "src.txt"
    src.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    out, plot = tmp_path / "attr.json", tmp_path / "attr.png"
    result = heed_cli("attribute", trained_run, "--src", src, "--output", out, "--plot", plot, "--steps", "16")
    assert result.exit_code == 0, result.output
    cli = json.loads(out.read_text(encoding="utf-8"))
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with TestClient(create_app({"m": translator})) as client:
        response = client.post("/v1/attribute", json={"sentences": SOURCES, "steps": 16})
    assert response.status_code == 200, response.text
    served = response.json()["attributions"]
    for mine, theirs, served_one in zip(python, cli, served):
        assert mine["tgt_tokens"] == theirs["tgt_tokens"] == served_one["tgt_tokens"]
        for key in ("source", "prefix", "attention", "log_probs", "delta", "agreement"):
            np.testing.assert_allclose(theirs[key], mine[key], rtol=1e-6, atol=1e-9)
            np.testing.assert_allclose(served_one[key], mine[key], rtol=1e-6, atol=1e-9)
    for number, a in enumerate(python, start=1):
        assert f"{number}\t{' '.join(a['tgt_tokens'])}\tagreement {np.mean(a['agreement']):+.2f}" in result.stdout
    assert len(python[0]["source"]) == len(python[0]["tgt_tokens"]) + 1


def test_a_given_translation_is_attributed_as_given(trained_run, tmp_path):
    translator = _translator(trained_run)
    a = translator.attribute(["3 mars 1998"], ["1998-03-04"], method="grad_x_input")[0]
    assert a.tgt_tokens == list("1998-03-04") and a.prefix_tokens[0] == "<s>"
    assert a.source.shape == (11, len(a.src_tokens) + 1) and a.steps is None


def test_pairs_no_sentence_can_hold_are_refused_naming_their_index(trained_run):
    from heed.errors import HeedError

    translator = _translator(trained_run)
    with pytest.raises(HeedError, match=r"tgt_texts\[1\]"):
        translator.attribute(SOURCES, [["1", "9"], "19\x0098"])
    with pytest.raises(HeedError, match=r"tgt_texts\[1\]"):
        translator.attention_layers(SOURCES, ["1998-03-03", "19\x0098"])
    with pytest.raises(HeedError, match=r"src_texts\[1\] is empty: there is nothing to attribute to"):
        translator.attribute(["3 mars 1998", " "], ["1998-03-03", "1998"])


# ----------------------------------------------------------------------------- contrastive


@pytest.mark.parametrize("run_name", ["trained_run", "transformer_run"])
def test_contrastive_attribution_is_complete_for_the_difference_of_two_outputs(run_name, request):
    """Why A and not B: integrated gradients of log p(A) - log p(B) over the source embeddings (the
    decoder inputs held) sum to f(input) - f(zero source), f computed here without Captum; 200
    points, float64, tolerance 1% of the change + 1e-3."""
    translator = _translator(request.getfixturevalue(run_name), torch.float64)
    model = translator.model
    source = SOURCES[0]
    output = translator.translate([source])[0].text
    other = "2004-06-12"
    (got,) = translator.contrast([source], [other], method="integrated_gradients", steps=200)
    src_ids, out_ids = _ids(translator, source)
    other_ids = translator.codec.tgt_ids(translator.codec.tgt_tokens(other), translator.codec.src_tokens(source))
    f_out, read = _log_probs(model, src_ids, out_ids)
    f_other, read_other = _log_probs(model, src_ids, other_ids)
    assert got.log_prob_output == pytest.approx(float(f_out.sum()), rel=1e-9)
    assert got.log_prob_contrast == pytest.approx(float(f_other.sum()), rel=1e-9)
    zero_source = torch.zeros_like(read["source"])
    base_out, _ = _log_probs(model, src_ids, out_ids, (zero_source, read["target"]))
    base_other, _ = _log_probs(model, src_ids, other_ids, (zero_source, read_other["target"]))
    change = got.difference - float(base_out.sum() - base_other.sum())
    assert abs(got.source.sum() - change) <= 0.01 * abs(change) + 1e-3, (got.source.sum(), change)
    assert got.delta == pytest.approx(got.source.sum() - change, abs=1e-6)
    # the model prefers its own output, and the source moves the difference (the tiny Transformer
    # reads its source little: 0.024 nats seen; the RNN's change is larger)
    assert got.difference > 0 and abs(change) > 0.01 and np.abs(got.source).max() > 1e-3
    assert got.output_tokens == translator.translate([source])[0].tokens and output != other
    assert len(got.source) == len(got.src_tokens) + 1


def test_a_contrast_the_vocabulary_cannot_spell_is_refused_naming_it(trained_run):
    from heed.api import Translator
    from heed.errors import HeedError

    translator = Translator.load(trained_run)
    with pytest.raises(HeedError, match=r"contrasts\[0\]: 'ж' is not a token"):
        translator.contrast(["3 mars 1998"], ["1998-ж3-03"])
    with pytest.raises(HeedError, match="2 source sentences but 1 contrasts; give one per source"):
        translator.contrast(["3 mars 1998", "le 12 juin 2004"], ["1998-03-03"])
