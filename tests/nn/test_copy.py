"""Copy attention, the pointer-generator of See et al. 2017: the mixture (eqs. 8-9) by hand, the
extended ids, and the decoders and search that carry it; the issue's must-show, copying names
never seen in training, is at the end."""
from __future__ import annotations

import math

import pytest
import torch
from search_fakes import assert_beam_of_one_equals_greedy, teacher_forced
from step_decoding import assert_alone_equals_in_batch, decode_step_by_step

from heed.data.extended import ExtendedVocab, source_ids, source_to_target
from heed.data.vocab import SPECIALS, Vocab
from heed.nn.masks import lengths_to_mask
from heed.nn.rnn.copy import PointerGenerator
from heed.nn.rnn.coverage import coverage_loss

SRC_VOCAB = Vocab([*SPECIALS, "a", "b"])
TGT_VOCAB = Vocab([*SPECIALS, "a", "q"])


def make_pointer(context: int = 2, state: int = 2, inputs: int = 1) -> PointerGenerator:
    return PointerGenerator(context_size=context, state_size=state, input_size=inputs,
                            source_to_target=source_to_target(SRC_VOCAB, TGT_VOCAB), target_size=len(TGT_VOCAB), unk_id=3)


# --- the mixture by hand ----------------------------------------------------------------------------

def test_worked_example_mixture_puts_one_minus_p_gen_times_attention_on_a_copied_unknown() -> None:
    # V = 5 (zero logits: P_vocab = 1/5 each). The switch's weights are 0 and its bias ln 3, so
    # p_gen = sigmoid(ln 3) = 3/4. Source positions hold extended ids [4, 5, 6, 5] with attention
    # [0.1, 0.2, 0.3, 0.4]: ids 5 and 6 are temporary (copied unknowns), id 4 a vocabulary word.
    #   P(0..3) = 3/4 * 1/5                 = 0.15
    #   P(4)    = 0.15 + 1/4 * 0.1          = 0.175
    #   P(5)    =        1/4 * (0.2 + 0.4)  = 0.15
    #   P(6)    =        1/4 * 0.3          = 0.075     sum = 4 * 0.15 + 0.175 + 0.15 + 0.075 = 1
    pointer = PointerGenerator(context_size=1, state_size=1, input_size=1, source_to_target=[0, 1, 2, 3],
                               target_size=5, unk_id=3).double()
    with torch.no_grad():
        pointer.gate.weight.zero_()
        pointer.gate.bias.fill_(math.log(3))
    weights = torch.tensor([[0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    copy_ids = torch.tensor([[4, 5, 6, 5]])
    log_p = pointer(torch.zeros(1, 5, dtype=torch.float64), torch.randn(1, 3, dtype=torch.float64), weights,
                    copy_ids, width=7)
    by_hand = torch.tensor([[0.15, 0.15, 0.15, 0.15, 0.175, 0.15, 0.075]], dtype=torch.float64)
    torch.testing.assert_close(log_p.exp(), by_hand, rtol=0, atol=1e-15)
    # a float16 model's mixture is computed (and returned) in float32
    half = pointer.half()(torch.zeros(1, 5).half(), torch.randn(1, 3).half(), weights.half(), copy_ids, width=7)
    assert half.dtype == torch.float32
    torch.testing.assert_close(half.exp(), by_hand.float(), rtol=0, atol=1e-3)


@pytest.mark.parametrize("all_steps", [False, True], ids=["one_step", "all_steps"])
def test_mixture_sums_to_one_over_the_extended_vocabulary_and_is_minus_inf_on_unused_ids(all_steps: bool) -> None:
    pointer = make_pointer()
    lead = (3, 4) if all_steps else (3,)
    weights = torch.softmax(torch.randn(*lead, 5), dim=-1)
    copy_ids = torch.tensor([[4, 6, 6, 7, 2], [5, 4, 6, 2, 0], [6, 2, 0, 0, 0]])
    log_p = pointer(torch.randn(*lead, 6), torch.randn(*lead, 5), weights, copy_ids, width=9)
    assert log_p.shape == (*lead, 9)
    torch.testing.assert_close(log_p.exp().sum(-1), torch.ones(lead), rtol=0, atol=1e-6)
    assert torch.isneginf(log_p[..., 8]).all()  # no source token has id 8


def test_extended_ids_agree_with_the_data_side() -> None:
    # The model sees only the source ids; it must name each position as ExtendedVocab does.
    pointer = make_pointer()
    sentences = [["b", "zed", "a", "b", "zed", "q"], ["x", "a"], ["q", "y", "b", "y"]]
    width = max(map(len, sentences)) + 1
    src = torch.zeros(len(sentences), width, dtype=torch.long)
    expected = torch.zeros_like(src)
    for r, tokens in enumerate(sentences):
        ids = [*source_ids(tokens, SRC_VOCAB, TGT_VOCAB), 2]  # + </s>
        src[r, :len(ids)] = torch.tensor(ids)
        expected[r, :len(ids)] = torch.tensor([*ExtendedVocab.of(tokens, TGT_VOCAB).encode(tokens), 2])
    ids, n_unknown = pointer.extended_ids(src)
    assert torch.equal(ids, expected)
    assert n_unknown == 2  # "b" and "zed"; "x"; "y" and "b"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16,
                                   pytest.param(torch.bfloat16, marks=pytest.mark.cpu_bf16)])
def test_an_all_padding_row_gives_the_vocabulary_distribution_not_nan(dtype: torch.dtype) -> None:
    pointer = make_pointer().to(dtype)
    weights = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]], dtype=dtype)  # row 1: no source at all
    logits = torch.randn(2, 6).to(dtype)
    copy_ids = torch.tensor([[6, 4, 0], [0, 0, 0]])
    gate_input = torch.randn(2, 5).to(dtype).requires_grad_()
    log_p = pointer(logits, gate_input, weights, copy_ids, width=7)
    assert not log_p.isnan().any()
    torch.testing.assert_close(log_p[1, :6], torch.log_softmax(logits[1].float(), -1), rtol=0, atol=1e-6)
    torch.testing.assert_close(log_p.exp().sum(-1), torch.ones(2), rtol=0, atol=1e-3)
    log_p[:, :6].sum().backward()
    assert torch.isfinite(gate_input.grad).all()


# --- in the decoders ----------------------------------------------------------------------------------

from heed.config import config_from_dict
from heed.errors import ConfigError
from heed.nn.build import ModelConfig, build_model
from heed.nn.rnn.attention import SCORES
from heed.nn.rnn.seq2seq import Seq2Seq
from heed.search import DecodeConfig, Prefix, beam_search, greedy_search, sample, search

S, V = 8, 9  # source and target vocabulary sizes
TABLE = [0, 1, 2, 3, 4, 5, -1, -1]  # source ids 4, 5 are target words 4, 5; 6, 7 the target lacks
LENGTHS = torch.tensor([6, 3, 1, 4])
SRC_LEN, TGT_LEN = 6, 5
SMALL = dict(embed_size=6, hidden_size=8, dropout=0.3, copy=True)
CONFIGS = {
    "luong_feed_general": dict(decoder="luong"),
    "luong_nofeed_dot": dict(decoder="luong", input_feeding=False, attention="dot"),
    "luong_feed_gru_local_cosine": dict(decoder="luong", rnn="gru", attention="cosine", attention_window=1),
    "luong_feed_scaled_dot": dict(decoder="luong", attention="scaled_dot"),
    "luong_feed_location": dict(decoder="luong", attention="location", attention_positions=SRC_LEN),
    "bahdanau_additive": dict(decoder="bahdanau"),
    "bahdanau_local_general": dict(decoder="bahdanau", attention="general", attention_window=1),
    # with coverage (See et al. 2017's full model, eqs. 8-13): c^t in DecoderState, the mixture over
    # the coverage-aware weights
    "luong_feed_coverage": dict(decoder="luong", attention="additive", coverage=True),
    "luong_nofeed_coverage": dict(decoder="luong", input_feeding=False, attention="additive", coverage=True),
    "bahdanau_gru_local_coverage": dict(decoder="bahdanau", rnn="gru", attention_window=1, coverage=True),
}
COVERAGE_CONFIGS = [name for name in CONFIGS if CONFIGS[name].get("coverage")]


def test_every_score_is_covered() -> None:
    assert {c.get("attention", "general" if c["decoder"] == "luong" else "additive")
            for c in CONFIGS.values()} == set(SCORES)


def make_model(**overrides) -> Seq2Seq:
    return build_model(ModelConfig(**{**SMALL, **overrides}), src_vocab_size=S, tgt_vocab_size=V,
                       source_to_target=TABLE).double().eval()


def make_batch(seed: int = 0):
    """src (4, 6) copy-model source ids + </s>: source words (4, 5: target words too; 6, 7: not),
    S + t words outside the source vocabulary that are target word t, and S + V + j unknowns;
    tgt_in (4, 5) BOS + extended ids, some of them temporary (V, V + 1)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.tensor([[6, 4, 17, 18, 13, 2], [17, 6, 2, 0, 0, 0], [2, 0, 0, 0, 0, 0], [18, 18, 5, 2, 0, 0]])
    tgt_in = torch.randint(3, V + 2, (4, TGT_LEN), generator=g)
    tgt_in[:, 0] = 1
    return src, tgt_in


@pytest.mark.parametrize("name", list(CONFIGS))
def test_step_by_step_decoding_equals_teacher_forced_pass(name: str) -> None:
    model = make_model(**CONFIGS[name])
    src, tgt_in = make_batch()
    with torch.no_grad():
        step_logits, step_attention = decode_step_by_step(model, src, LENGTHS, tgt_in)
        forced = model(src, LENGTHS, tgt_in)
    # extended ids: V + the most unknowns of one sentence (row 0: 6, 17, 18 -> 3 temporary ids)
    assert forced.logits.shape == (4, TGT_LEN, V + 3)
    torch.testing.assert_close(forced.logits, step_logits, rtol=0, atol=1e-10)
    torch.testing.assert_close(forced.attention, step_attention, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_step_gives_log_probabilities_that_search_log_softmax_leaves_unchanged(name: str) -> None:
    model = make_model(**CONFIGS[name])
    src, tgt_in = make_batch()
    with torch.no_grad():
        logits, _ = decode_step_by_step(model, src, LENGTHS, tgt_in)
    torch.testing.assert_close(logits.exp().sum(-1), torch.ones(4, TGT_LEN, dtype=torch.float64), rtol=0, atol=1e-12)
    finite = torch.isfinite(logits)
    torch.testing.assert_close(torch.log_softmax(logits, dim=-1)[finite], logits[finite], rtol=0, atol=1e-12)
    # row 3 (one unknown, 18 -> V) has no source token for V + 1 or V + 2: probability 0; every
    # vocabulary word keeps p_gen P_vocab > 0
    assert torch.isneginf(logits[3, :, V + 1:]).all() and torch.isfinite(logits[:, :, :V]).all()


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_sentence_decodes_the_same_alone_as_in_a_padded_batch(name: str) -> None:
    model = make_model(**CONFIGS[name])
    src, tgt_in = make_batch()
    assert_alone_equals_in_batch(model, src, LENGTHS, tgt_in)


@pytest.mark.parametrize("name", ["luong_feed_general", "bahdanau_additive", "luong_nofeed_dot"])
def test_the_loss_is_the_nll_of_the_mixture_with_label_smoothing_over_the_vocabulary(name: str) -> None:
    model = make_model(**CONFIGS[name])
    src, tgt_in = make_batch()
    tgt_out = torch.cat([tgt_in[:, 1:], torch.full((4, 1), 2)], dim=1)
    tgt_out[2, 2:] = 0  # padding
    # a temporary id only where its sentence has that unknown: row 3 has one (V), row 2 none
    tgt_out[3] = tgt_out[3].clamp(max=V)
    tgt_out[2] = tgt_out[2].clamp(max=V - 1)
    batch = _Batch(src, LENGTHS, tgt_in, tgt_out)
    with torch.no_grad():
        log_p = model(src, LENGTHS, tgt_in).logits  # (4, tgt_len, width)
        real = tgt_out != 0
        nll = -log_p.gather(-1, tgt_out.unsqueeze(-1)).squeeze(-1)[real]
        smooth = -log_p[..., :V].mean(-1)[real]
        loss = model.loss(batch)
        smoothed = model.loss(batch, label_smoothing=0.1)
    assert torch.isfinite(nll).all()
    torch.testing.assert_close(loss.total, nll.sum(), rtol=1e-12, atol=0)
    torch.testing.assert_close(loss.cross_entropy, loss.total, rtol=0, atol=0)
    assert loss.coverage is None
    torch.testing.assert_close(smoothed.total, (0.9 * nll + 0.1 * smooth).sum(), rtol=1e-12, atol=0)


def test_the_loss_trains_the_switch_and_every_gradient_is_finite() -> None:
    model = make_model(**CONFIGS["luong_feed_general"]).train()
    src, tgt_in = make_batch()
    tgt_out = torch.cat([tgt_in[:, 1:], torch.full((4, 1), 2)], dim=1)
    tgt_out[1:3] = tgt_out[1:3].clamp(max=V - 1)
    model.loss(_Batch(src, LENGTHS, tgt_in, tgt_out), label_smoothing=0.1).total.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert all(torch.isfinite(g).all() for g in grads.values())
    assert grads["decoder.copy.gate.weight"].abs().sum() > 0


class _Batch:
    def __init__(self, src, src_lengths, tgt_in, tgt_out):
        self.src, self.src_lengths, self.tgt_in, self.tgt_out = src, src_lengths, tgt_in, tgt_out


# --- search -----------------------------------------------------------------------------------------

def copying_model(name: str = "luong_feed_general") -> Seq2Seq:
    """A model whose switch always copies (p_gen = sigmoid(-30)): every output is a source token."""
    model = make_model(**CONFIGS[name]).float()
    with torch.no_grad():
        model.decoder.copy.gate.weight.zero_()
        model.decoder.copy.gate.bias.fill_(-30.0)
    return model


@pytest.mark.parametrize("name", list(CONFIGS))
def test_beam_of_one_equals_greedy(name: str) -> None:
    model = make_model(**CONFIGS[name]).float()
    src, _ = make_batch()
    assert_beam_of_one_equals_greedy(model, src, LENGTHS)


def test_every_search_emits_and_feeds_back_temporary_ids() -> None:
    model = copying_model()
    src, _ = make_batch()
    copyable = [{V, V + 1, V + 2, 4, 5, 2}, {V, V + 1, 2}, {2}, {V, 5, 2}]  # each row's source tokens, as extended ids
    cfg = DecodeConfig(beam_size=3, n_best=3, max_len_a=0.0, max_len_b=4, min_len=0)
    trees: list = []
    runs = {
        "greedy": [[h] for h in greedy_search(model, src, LENGTHS, DecodeConfig(max_len_a=0.0, max_len_b=4, min_len=0))],
        "beam": beam_search(model, src, LENGTHS, cfg, trees=trees),
        "sample": sample(model, src, LENGTHS, DecodeConfig(sampling=True, n_best=2, seed=1, max_len_a=0.0,
                                                           max_len_b=4, min_len=0)),
    }
    for kind, out in runs.items():
        for row, nbest in enumerate(out):
            assert nbest, kind
            # the best (and every sample) copies; beam's later n-best may hold p_gen's e^-30 words
            for h in nbest if kind == "sample" else nbest[:1]:
                assert set(h.tokens) <= copyable[row], (kind, row, h.tokens)
            assert all(math.isfinite(h.log_prob) for h in nbest)
    assert any(t >= V for nbest in runs["beam"] for h in nbest for t in h.tokens)
    assert len(runs["beam"][0]) == 3  # n-best
    tokens = {n.token for tree in trees for n in tree.nodes if n.token is not None}
    assert tokens & {V, V + 1, V + 2} and max(tokens) < V + 3


@pytest.mark.parametrize("name", ["luong_feed_general", "bahdanau_additive"])
def test_a_sentence_samples_the_same_alone_as_in_a_batch_whose_extended_vocabulary_is_wider(name: str) -> None:
    # Alone, row 3 has one temporary id; in the batch the logits have three (row 0's).
    model = make_model(**CONFIGS[name]).float()
    src, _ = make_batch()
    cfg = DecodeConfig(sampling=True, n_best=3, seed=7, temperature=1.5, max_len_a=0.0, max_len_b=5)
    batched = sample(model, src, LENGTHS, cfg)
    for b, n in enumerate(LENGTHS.tolist()):
        alone = sample(model, src[b:b + 1, :n], LENGTHS[b:b + 1], cfg)[0]
        assert [h.tokens for h in batched[b]] == [h.tokens for h in alone]
        assert [h.log_prob for h in batched[b]] == pytest.approx([h.log_prob for h in alone], abs=1e-5)


def test_a_forced_prefix_may_hold_a_temporary_id() -> None:
    model = make_model(**CONFIGS["bahdanau_additive"]).float()
    src, _ = make_batch()
    prefix = Prefix.of([[V + 1, 4], [V], [], [V]], pad_id=0)
    for cfg in (DecodeConfig(max_len_a=0.0, max_len_b=4), DecodeConfig(beam_size=2, max_len_a=0.0, max_len_b=4)):
        out = search(model, src, LENGTHS, cfg, prefix=prefix)
        assert out[0][0].tokens[:2] == [V + 1, 4] and out[1][0].tokens[:1] == [V] and out[3][0].tokens[:1] == [V]


# --- config -------------------------------------------------------------------------------------------

DATES = {"data": {"task": "dates"}}


def test_copy_with_the_plain_decoder_is_an_error_naming_model_copy() -> None:
    with pytest.raises(ConfigError) as e:
        config_from_dict({**DATES, "model": {"decoder": "plain", "copy": True}})
    assert e.value.field == "model.copy" and "no attention" in str(e.value)


def test_copy_is_off_by_default_and_adds_only_the_switch() -> None:
    plain = build_model(ModelConfig(**{**SMALL, "copy": False}), src_vocab_size=S, tgt_vocab_size=V)
    copying = make_model()
    assert ModelConfig().copy is False and plain.decoder.copy is None
    extra = set(dict(copying.named_parameters())) - set(dict(plain.named_parameters()))
    assert extra == {"decoder.copy.gate.weight", "decoder.copy.gate.bias"}
    assert "decoder.copy.source_to_target" not in copying.state_dict()  # derived from the vocabularies
    with pytest.raises(ValueError, match="source_to_target"):
        build_model(ModelConfig(**SMALL), src_vocab_size=S, tgt_vocab_size=V)


# --- copy with coverage: See et al. 2017's full model ---------------------------------------------------

from dataclasses import replace

from heed.nn.rnn.copy import LOG_TINY, mixture_loss


@pytest.mark.parametrize("name", COVERAGE_CONFIGS)
def test_a_copy_decoder_carries_the_coverage_and_mixes_the_coverage_aware_weights(name: str) -> None:
    model = make_model(**CONFIGS[name])
    with torch.no_grad():
        model.decoder.copy.gate.weight.zero_()
        model.decoder.copy.gate.bias.fill_(-math.log(3))  # p_gen = 1/4: the copy part carries 3/4
    blind = make_model(**CONFIGS[name])
    blind.load_state_dict(model.state_dict())
    with torch.no_grad():
        blind.decoder.attention.coverage_proj.weight.zero_()  # the same model with w_c = 0
    src, tgt_in = make_batch()
    copy_ids, _ = model.decoder.copy.extended_ids(src)
    with torch.no_grad():
        enc, blind_enc = model.encode(src, LENGTHS), blind.encode(src, LENGTHS)
        state, blind_state = model.init_state(enc), blind.init_state(blind_enc)
        summed = torch.zeros(4, SRC_LEN, dtype=torch.float64)
        for t in range(TGT_LEN):
            out, blind_out = model.step(tgt_in[:, t], state, enc), blind.step(tgt_in[:, t], blind_state, blind_enc)
            summed = summed + out.attention  # c^{t+1} = c^t + a^t (eq. 10), by hand
            torch.testing.assert_close(out.state.coverage, summed, rtol=0, atol=0)
            # a temporary id's probability is (1 - p_gen) times the attention on its positions (eq. 9),
            # the weights renormalised where local-p's Gaussian leaves them summing to less than 1
            for row, k in [(0, 0), (0, 2), (3, 0)]:
                on_it = out.attention[row][copy_ids[row] == V + k].sum() / out.attention[row].sum()
                torch.testing.assert_close(out.logits[row, V + k].exp(), 0.75 * on_it, rtol=1e-12, atol=0)
            if t > 0:  # from the second step on, the coverage moves the weights the mixture copies with
                assert not torch.allclose(out.attention[:2], blind_out.attention[:2], atol=1e-6)
            state, blind_state = out.state, blind_out.state
    assert torch.equal(state.coverage[~lengths_to_mask(LENGTHS, SRC_LEN)], torch.zeros(int((6 - LENGTHS).sum()),
                                                                                       dtype=torch.float64))


def by_hand_coverage_loss(weights: torch.Tensor, tgt_out: torch.Tensor) -> float:
    """sum over real target steps t and source positions i of min(a_i^t, sum_{t' < t} a_i^{t'}), in loops."""
    total = 0.0
    for b in range(weights.size(0)):
        covered = [0.0] * weights.size(2)
        for t in range(weights.size(1)):
            a = weights[b, t].tolist()
            if tgt_out[b, t] != 0:
                total += sum(min(a_i, c_i) for a_i, c_i in zip(a, covered, strict=True))
            covered = [c_i + a_i for c_i, a_i in zip(covered, a, strict=True)]
    return total


def copy_targets(tgt_in: torch.Tensor) -> torch.Tensor:
    """tgt_out for make_batch's tgt_in: shifted, </s>, padding in row 2, temporary ids only where the row has them."""
    tgt_out = torch.cat([tgt_in[:, 1:], torch.full((4, 1), 2)], dim=1)
    tgt_out[2, 2:] = 0
    tgt_out[3] = tgt_out[3].clamp(max=V)
    tgt_out[2] = tgt_out[2].clamp(max=V - 1)
    return tgt_out


@pytest.mark.parametrize("name", ["luong_feed_coverage", "bahdanau_gru_local_coverage"])
def test_the_copy_models_loss_is_the_mixture_nll_plus_lambda_times_the_hand_summed_coverage_loss(name: str) -> None:
    lam = 0.5
    model = make_model(**CONFIGS[name], coverage_loss=lam)
    src, tgt_in = make_batch()
    tgt_out = copy_targets(tgt_in)
    with torch.no_grad():
        out = model(src, LENGTHS, tgt_in)
        # local-p may give a copied word outside its window probability 0: the loss floors log P (heed.nn.rnn.copy)
        nll = -out.logits.gather(-1, tgt_out.unsqueeze(-1)).squeeze(-1).clamp(min=LOG_TINY)[tgt_out != 0].sum()
        covloss = by_hand_coverage_loss(out.attention, tgt_out)
        got = model.loss(_Batch(src, LENGTHS, tgt_in, tgt_out))
        smoothed = model.loss(_Batch(src, LENGTHS, tgt_in, tgt_out), label_smoothing=0.1)
    assert covloss > 0
    torch.testing.assert_close(got.cross_entropy, nll, rtol=1e-12, atol=0)
    assert float(got.coverage) == pytest.approx(lam * covloss, rel=1e-12)
    torch.testing.assert_close(got.total, got.cross_entropy + got.coverage, rtol=0, atol=0)
    torch.testing.assert_close(smoothed.coverage, got.coverage, rtol=0, atol=0)  # smoothing leaves eq. 12 alone
    # lambda 0: the same weights train on the mixture's NLL alone and report no coverage loss
    plain = make_model(**CONFIGS[name])
    plain.load_state_dict(model.state_dict())
    without = plain.loss(_Batch(src, LENGTHS, tgt_in, tgt_out))
    assert without.coverage is None
    torch.testing.assert_close(without.total, nll, rtol=1e-12, atol=0)


def test_the_full_models_loss_trains_the_switch_and_w_c_with_finite_gradients() -> None:
    model = make_model(**CONFIGS["luong_feed_coverage"], coverage_loss=1.0).train()
    src, tgt_in = make_batch()
    model.loss(_Batch(src, LENGTHS, tgt_in, copy_targets(tgt_in)), label_smoothing=0.1).total.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert all(torch.isfinite(g).all() for g in grads.values())
    assert grads["decoder.copy.gate.weight"].abs().sum() > 0
    assert grads["decoder.attention.coverage_proj.weight"].abs().sum() > 0


@pytest.mark.parametrize("name", ["luong_feed_coverage", "bahdanau_gru_local_coverage"])
def test_an_all_padding_row_with_copy_and_coverage_gives_the_vocabulary_distribution_not_nan(name: str) -> None:
    model = make_model(**CONFIGS[name], coverage_loss=1.0).train()
    src, tgt_in = make_batch()
    tgt_out = copy_targets(tgt_in)
    enc = model.encode(src, LENGTHS)
    mask = enc.mask.clone()
    mask[2] = False  # row 2 has no source token at all
    enc = replace(enc, mask=mask)
    out = model.decoder(tgt_in, model.init_state(enc), enc)
    assert not out.logits.isnan().any() and not out.attention.isnan().any()
    assert torch.equal(out.attention[2], torch.zeros_like(out.attention[2]))  # so it adds 0 to the coverage
    # nothing to copy: p_gen = 1 and P = P_vocab, a distribution over the vocabulary alone
    torch.testing.assert_close(out.logits[2, :, :V].exp().sum(-1), torch.ones(TGT_LEN, dtype=torch.float64),
                               rtol=0, atol=1e-12)
    assert torch.isneginf(out.logits[2, :, V:]).all()
    nll = mixture_loss(out.logits, tgt_out, ignore_index=0, vocab_size=V)
    total = nll + coverage_loss(out.attention, tgt_out != 0)
    assert torch.isfinite(total)
    total.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("name", ["luong_feed_coverage", "bahdanau_gru_local_coverage"])
def test_every_beam_hypothesis_of_the_full_model_scores_as_its_teacher_forced_pass(name: str) -> None:
    # Beams reorder rows every step; a coverage vector left with the wrong row would change later
    # weights, and with them the mixture, from what the teacher-forced pass gives the same tokens.
    model = copying_model(name)
    with torch.no_grad():
        model.decoder.copy.gate.bias.fill_(0.0)  # both parts of the mixture matter
    src, _ = make_batch()
    with torch.no_grad():
        found = beam_search(model, src, LENGTHS, DecodeConfig(beam_size=4, n_best=4, max_len_a=0.0, max_len_b=5))
    for b, hyps in enumerate(found):
        log_probs, _ = teacher_forced(model, src[b:b + 1], int(LENGTHS[b]), [hyp.tokens for hyp in hyps])
        assert [hyp.log_prob for hyp in hyps] == pytest.approx(log_probs.tolist(), abs=1e-4)


def test_copy_with_coverage_and_its_loss_is_a_valid_config() -> None:
    cfg = config_from_dict({**DATES, "model": {"copy": True, "attention": "additive", "coverage": True,
                                               "coverage_loss": 1.0}})
    assert cfg.model.copy and cfg.model.coverage and cfg.model.coverage_loss == 1.0
    with pytest.raises(ConfigError) as e:  # copy does not lift coverage's own rule
        config_from_dict({**DATES, "model": {"copy": True, "coverage": True}})
    assert e.value.field == "model.coverage"
