"""Coverage attention (Tu et al. 2016; See et al. 2017, eqs. 10-13): the coverage vector is the running
sum of the attention weights, it moves with its row through beam search, padding adds exactly 0 to
it, the additive score feeds on it, and the coverage loss sum_t sum_i min(a_i^t, c_i^t) has the value
and gradients worked out by hand. The decoder-level truths every score keeps (step-by-step equals
teacher-forced, alone equals padded, beam 1 equals greedy) run over the coverage models in
test_attention_family.py's CONFIGS."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from nn.test_attention_family import (
    BATCH,
    CONFIGS,
    DEC_LENGTHS,
    DEC_SRC_LEN,
    DEC_TGT_LEN,
    EMPTY_ROW,
    SIZE,
    SRC_LEN,
    TGT_LEN,
    make_batch,
    make_inputs,
    make_model,
)
from search_fakes import assert_beam_of_one_equals_greedy, teacher_forced

from heed.nn.masks import lengths_to_mask
from heed.nn.rnn.attention import Attention
from heed.nn.rnn.coverage import coverage_loss
from heed.search import DecodeConfig, beam_search

COVERAGE_CONFIGS = [name for name in CONFIGS if CONFIGS[name].get("coverage")]


def coverage_attention(dtype: torch.dtype = torch.float64, window: int | None = None) -> Attention:
    return Attention("additive", query_size=SIZE, key_size=SIZE, coverage=True, window=window).to(dtype)


# --- the score -------------------------------------------------------------------------------------------

def test_worked_example_coverage_term_by_hand() -> None:
    # Hidden size 1, W_q = W_k = 0, b = 0, v = 1, w_c = -1: e_i = tanh(-c_i). With c = [0, atanh(1/2)]
    # the scores are [0, -1/2], so a = [1, e^-1/2] / (1 + e^-1/2): attention turns away from what is covered.
    module = Attention("additive", query_size=2, key_size=2, hidden_size=1, coverage=True).double()
    with torch.no_grad():
        for p in (module.key_proj.weight, module.query_proj.weight, module.query_proj.bias):
            p.zero_()
        module.v.weight.fill_(1.0)
        module.coverage_proj.weight.fill_(-1.0)
    query, keys, values = torch.randn(1, 2, dtype=torch.float64), torch.randn(1, 2, 2, dtype=torch.float64), \
        torch.randn(1, 2, 3, dtype=torch.float64)
    coverage = torch.tensor([[0.0, math.atanh(0.5)]], dtype=torch.float64)
    weights = module(query, module.project_keys(keys), values, coverage=coverage).weights
    by_hand = torch.tensor([[1.0, math.exp(-0.5)]], dtype=torch.float64) / (1 + math.exp(-0.5))
    torch.testing.assert_close(weights, by_hand, rtol=0, atol=1e-15)


def test_without_coverage_so_far_the_score_is_the_additive_one() -> None:
    # c^0 = 0: the coverage term adds nothing, so the first step is plain Bahdanau attention.
    module = coverage_attention()
    plain = Attention("additive", query_size=SIZE, key_size=SIZE).double()
    plain.load_state_dict({k: v for k, v in module.state_dict().items() if "coverage" not in k})
    query, keys, values, mask = make_inputs(one_step=True)
    got = module(query, module.project_keys(keys), values, mask, coverage=torch.zeros(BATCH, SRC_LEN,
                                                                                       dtype=torch.float64))
    want = plain(query, plain.project_keys(keys), values, mask)
    torch.testing.assert_close(got.weights, want.weights, rtol=0, atol=1e-15)
    torch.testing.assert_close(got.context, want.context, rtol=0, atol=1e-15)


def test_a_coverage_score_needs_the_coverage_and_only_it_takes_one() -> None:
    query, keys, values, mask = make_inputs(one_step=True)
    with pytest.raises(ValueError, match="coverage"):
        coverage_attention()(query, keys, values, mask)
    plain = Attention("additive", query_size=SIZE, key_size=SIZE).double()
    with pytest.raises(ValueError, match="coverage"):
        plain(query, plain.project_keys(keys), values, mask, coverage=torch.zeros(BATCH, SRC_LEN))
    with pytest.raises(ValueError, match="additive"):
        Attention("general", query_size=SIZE, key_size=SIZE, coverage=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16,
                                   pytest.param(torch.bfloat16, marks=pytest.mark.cpu_bf16)])
@pytest.mark.parametrize("window", [None, 1], ids=["global", "local_p"])
def test_all_padding_row_gives_zero_weights_context_and_coverage_not_nan(dtype: torch.dtype, window) -> None:
    module = coverage_attention(dtype, window)
    query, keys, values, mask = make_inputs(dtype)
    coverage = torch.rand(BATCH, TGT_LEN, SRC_LEN).to(dtype).masked_fill(~mask.unsqueeze(1), 0.0)
    for t in (query, keys, values, coverage):
        t.requires_grad_()
    context, weights = module(query, module.project_keys(keys), values, mask, coverage=coverage)
    assert context.dtype == weights.dtype == dtype
    assert torch.isfinite(context).all() and torch.isfinite(weights).all()
    assert torch.equal(weights[EMPTY_ROW], torch.zeros_like(weights[EMPTY_ROW]))
    assert torch.equal(context[EMPTY_ROW], torch.zeros_like(context[EMPTY_ROW]))
    padding = ~mask.unsqueeze(1).expand_as(weights)
    assert torch.equal(weights[padding], torch.zeros_like(weights[padding]))  # adds exactly 0 to coverage
    (context.float().pow(2).sum() + (weights.float() * torch.rand(weights.shape)).sum()).backward()
    for t in (query, values, coverage, *module.parameters()):
        assert torch.isfinite(t.grad).all(), f"non-finite gradient in {tuple(t.shape)}"


def test_the_attention_gradients_through_the_coverage_term_match_central_differences() -> None:
    module = coverage_attention()
    query, keys, values, mask = make_inputs(one_step=True)
    projected = module.project_keys(keys).detach()
    coverage = torch.rand(BATCH, SRC_LEN, dtype=torch.float64, requires_grad=True)
    query.requires_grad_()

    def attended(q, c, w_c):  # w_c as an input: the coverage term's own weight
        return tuple(torch.func.functional_call(module, {"coverage_proj.weight": w_c}, (q, projected, values, mask),
                                                {"coverage": c}))

    w_c = module.coverage_proj.weight.detach().clone().requires_grad_()
    torch.autograd.gradcheck(attended, (query, coverage, w_c))


# --- the coverage vector in the decoder -------------------------------------------------------------------

@pytest.mark.parametrize("name", COVERAGE_CONFIGS)
def test_the_coverage_vector_is_the_hand_summed_attention_and_zero_on_padding(name: str) -> None:
    model = make_model(**CONFIGS[name])
    src, tgt_in = make_batch()
    with torch.no_grad():
        enc = model.encode(src, DEC_LENGTHS)
        state = model.init_state(enc)
        assert torch.equal(state.coverage, torch.zeros(len(DEC_LENGTHS), DEC_SRC_LEN, dtype=torch.float64))
        summed = torch.zeros(len(DEC_LENGTHS), DEC_SRC_LEN, dtype=torch.float64)
        for t in range(DEC_TGT_LEN):
            out = model.step(tgt_in[:, t], state, enc)
            summed = summed + out.attention  # c^{t+1} = c^t + a^t, by hand
            state = out.state
            torch.testing.assert_close(state.coverage, summed, rtol=0, atol=0)
        padding = ~lengths_to_mask(DEC_LENGTHS, DEC_SRC_LEN)
        assert torch.equal(state.coverage[padding], torch.zeros(int(padding.sum()), dtype=torch.float64))
        if "local" not in name:  # global weights sum to 1 a step: the coverage sums to the step count
            torch.testing.assert_close(state.coverage.sum(-1), torch.full((len(DEC_LENGTHS),), float(DEC_TGT_LEN),
                                                                           dtype=torch.float64))


def test_select_reorders_the_coverage_with_its_rows() -> None:
    model = make_model(**CONFIGS["luong_feed_coverage"])
    src, tgt_in = make_batch()
    with torch.no_grad():
        enc = model.encode(src, DEC_LENGTHS)
        state = model.step(tgt_in[:, 0], model.init_state(enc), enc).state
    order = torch.tensor([2, 0, 0, 3])
    assert torch.equal(state.select(order).coverage, state.coverage[order])


@pytest.mark.parametrize("name", ["luong_feed_coverage", "bahdanau_gru_coverage"])
def test_every_beam_hypothesis_scores_as_its_teacher_forced_pass(name: str) -> None:
    # Beams reorder rows every step; a coverage vector left with the wrong row would change later
    # weights, and with them the log-probability, from what the teacher-forced pass gives the same tokens.
    model = make_model(**CONFIGS[name]).float()
    src, _ = make_batch()
    with torch.no_grad():
        found = beam_search(model, src, DEC_LENGTHS, DecodeConfig(beam_size=4, n_best=4, max_len_a=0.0,
                                                                   max_len_b=6))
    for b, hyps in enumerate(found):
        log_probs, _ = teacher_forced(model, src[b:b + 1], int(DEC_LENGTHS[b]), [hyp.tokens for hyp in hyps])
        assert [hyp.log_prob for hyp in hyps] == pytest.approx(log_probs.tolist(), abs=1e-4)


def test_greedy_and_beam_of_one_follow_the_same_coverage() -> None:
    model = make_model(**CONFIGS["bahdanau_gru_coverage"]).float()
    src, _ = make_batch()
    assert_beam_of_one_equals_greedy(model, src, DEC_LENGTHS)


def test_models_without_coverage_have_no_coverage_state_or_parameters() -> None:
    model = make_model(decoder="bahdanau")
    src, _ = make_batch()
    assert model.init_state(model.encode(src, DEC_LENGTHS)).coverage is None
    assert not any("coverage" in name for name in model.state_dict())
    covered = make_model(**CONFIGS["bahdanau_gru_coverage"])
    assert covered.decoder.attention.coverage_proj.weight.shape == (8, 1)  # w_c: one weight per hidden unit


# --- the coverage loss ------------------------------------------------------------------------------------

def test_worked_example_coverage_loss_by_hand() -> None:
    # a^1 = [.5, .5], a^2 = [.8, .2], a^3 = [.1, .9]; c^1 = 0, c^2 = [.5, .5], c^3 = [1.3, .7]
    #   covloss_1 = 0;  covloss_2 = min(.8, .5) + min(.2, .5) = .7;  covloss_3 = min(.1, 1.3) + min(.9, .7) = .8
    weights = torch.tensor([[[0.5, 0.5], [0.8, 0.2], [0.1, 0.9]]], dtype=torch.float64)
    every = torch.ones(1, 3, dtype=torch.bool)
    assert float(coverage_loss(weights, every)) == pytest.approx(1.5, abs=1e-15)
    # a padding target step counts nothing (and a padding step never comes before a real one)
    assert float(coverage_loss(weights, torch.tensor([[True, True, False]]))) == pytest.approx(0.7, abs=1e-15)
    # rows add up
    two = torch.cat([weights, weights.flip(-1)])
    assert float(coverage_loss(two, torch.ones(2, 3, dtype=torch.bool))) == pytest.approx(3.0, abs=1e-15)


def test_coverage_loss_gradients_match_central_differences() -> None:
    scores = torch.randn(3, 4, 5, dtype=torch.float64)
    tgt_mask = torch.tensor([[True] * 4, [True, True, False, False], [True, False, False, False]])

    def loss(s):
        return coverage_loss(torch.softmax(s, dim=-1), tgt_mask)

    torch.autograd.gradcheck(loss, (scores.requires_grad_(),))


def test_the_models_loss_adds_lambda_times_the_coverage_loss() -> None:
    lam = 0.5
    model = make_model(**CONFIGS["luong_feed_coverage"], coverage_loss=lam)
    src, tgt_in = make_batch()
    tgt_out = torch.cat([tgt_in[:, 1:], torch.full((len(DEC_LENGTHS), 1), model.eos_id)], dim=1)
    tgt_out[1, 2:] = model.pad_id  # a shorter target: its padding steps count nothing
    batch = SimpleNamespace(src=src, src_lengths=DEC_LENGTHS, tgt_in=tgt_in, tgt_out=tgt_out)
    got = model.loss(batch)
    out = model(src, DEC_LENGTHS, tgt_in)
    nll = F.cross_entropy(out.logits.reshape(-1, out.logits.size(-1)), tgt_out.reshape(-1),
                          ignore_index=model.pad_id, reduction="sum")
    want = lam * coverage_loss(out.attention, tgt_out != model.pad_id)
    torch.testing.assert_close(got.cross_entropy, nll)
    torch.testing.assert_close(got.coverage, want)
    torch.testing.assert_close(got.total, nll + want)
    assert float(got.coverage.detach()) > 0
    # lambda 0: the coverage model trains on the cross-entropy alone and reports no coverage loss
    plain = make_model(**CONFIGS["luong_feed_coverage"])
    plain.load_state_dict(model.state_dict())
    without = plain.loss(batch)
    assert without.coverage is None and torch.equal(without.total, without.cross_entropy)


def test_the_coverage_loss_trains_every_parameter_it_should() -> None:
    model = make_model(**CONFIGS["bahdanau_gru_coverage"], coverage_loss=1.0).train()
    src, tgt_in = make_batch()
    tgt_out = torch.cat([tgt_in[:, 1:], torch.full((len(DEC_LENGTHS), 1), model.eos_id)], dim=1)
    loss = model.loss(SimpleNamespace(src=src, src_lengths=DEC_LENGTHS, tgt_in=tgt_in, tgt_out=tgt_out))
    assert loss.coverage is not None
    grad = torch.autograd.grad(loss.coverage, model.decoder.attention.coverage_proj.weight)[0]
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0  # w_c learns from the coverage loss


# --- end to end: the trainer, heed.load, the CLI and the server need nothing special ------------------------

@pytest.fixture(scope="module")
def coverage_run(tiny_config, tmp_path_factory):
    """A tiny Luong model with coverage and the coverage loss, trained for a few steps."""
    from heed.config import config_from_dict
    from heed.train import train

    out = tmp_path_factory.mktemp("coverage") / "out"
    raw = tiny_config(out, epochs=1, max_steps=8)
    raw["model"] = {**raw["model"], "attention": "additive", "coverage": True, "coverage_loss": 1.0}
    train(config_from_dict(raw))
    return out


def test_a_coverage_model_translates_through_the_api_the_cli_and_the_server(coverage_run, heed_cli) -> None:
    import heed

    pytest.importorskip("fastapi", reason="heed[serve] is not installed")
    from fastapi.testclient import TestClient

    from heed.serve.app import ServeSettings, create_app

    translator = heed.load(str(coverage_run / "model"), device="cpu")
    sentences = ["March 3, 1998", "le 5 mai 2001"]
    nbest = translator.translate_nbest(sentences, beam=3, n_best=2)
    assert [len(n) for n in nbest] == [2, 2]
    for hyps in nbest:
        for t in hyps:
            weights = torch.as_tensor(t.attention)  # (output tokens + EOS, source tokens + EOS)
            torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[0], dtype=weights.dtype),
                                       atol=1e-5, rtol=0)
    result = heed_cli("translate", coverage_run / "model", "--beam", "3", input="\n".join(sentences) + "\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [n[0].text for n in nbest]
    settings = ServeSettings(max_sentences=10, max_chars=80, max_body=64 * 1024, max_queue=10, timeout=60.0)
    with TestClient(create_app({"coverage": translator}, settings)) as client:
        response = client.post("/v1/translate", json={"model": "coverage", "sentences": sentences, "beam_size": 3,
                                                       "n_best": 2, "trace": True})
    assert response.status_code == 200, response.text
    served = [[h["text"] for h in r["hypotheses"]] for r in response.json()["results"]]
    assert served == [[t.text for t in n] for n in nbest]
