"""Greedy and beam search: truths a person can check.

Three kinds of model (see search_fakes.py): tiny random seeded Seq2Seq models (luong / bahdanau /
plain), a scripted fake whose next-token probabilities are a table (so beams can be worked out by
hand), and the brute force of every output on a 4-token vocabulary.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import pytest
import torch
from pydantic import ValidationError
from search_fakes import (
    DECODERS,
    EOS,
    HAND_TABLE,
    MODEL_KINDS,
    A,
    B,
    C,
    D,
    ScriptedModel,
    assert_same_hypotheses,
    loves_eos,
    one_source,
    one_thread,  # noqa: F401  (an autouse fixture: one torch thread for this module)
    padded_batch,
    repeats_ngram,
    table,
    teacher_forced,
    tiny_model,
)
from torch import Tensor

from heed.errors import ConfigError
from heed.search import (
    DecodeConfig,
    Hypothesis,
    Prefix,
    beam_search,
    beam_search_one,
    coverage_penalty,
    greedy_search,
    length_penalty,
    search,
)
from heed.search.beam import _TWO_LEVEL_MIN_VOCAB_PER_CANDIDATE, _row_topk

# ---------------------------------------------------------------------------------------------
# Helpers


def gnmt_score(log_prob: float, n_tokens: int, attention: Tensor | None, cfg: DecodeConfig) -> float:
    """Wu et al. 2016, eq. 14, written out in plain Python."""
    score = log_prob / ((5 + n_tokens + 1) / 6) ** cfg.length_penalty
    if cfg.coverage_penalty:
        score += cfg.coverage_penalty * sum(math.log(min(c, 1.0)) for c in attention.sum(0).tolist())
    return score


@dataclass
class _Beam:
    tokens: list[int]
    log_prob: float
    state: object
    attention: list[Tensor]


def reference_beam_search(model, src: Tensor, src_len: int, cfg: DecodeConfig) -> list[Hypothesis]:
    """Textbook beam search, one sentence and one beam at a time, no early stopping (with stop
    "beam", the stop once `beam` hypotheses finished).

    Same rules as heed.search: the 2 * beam best extensions; EOS ones among the top beam finish;
    the beam best others live on; PAD/BOS never; EOS not before min_len; EOS forced at max_len."""
    k = cfg.beam_size
    enc = model.encode(src[None, :src_len], torch.tensor([src_len]))
    max_len = math.floor(cfg.max_len_a * src_len + cfg.max_len_b)
    live = [_Beam([], 0.0, model.init_state(enc), [])]
    finished: list[Hypothesis] = []
    for t in range(max_len + 1):
        candidates = []
        for beam in live:
            prev = beam.tokens[-1] if beam.tokens else model.bos_id
            out = model.step(torch.tensor([prev]), beam.state, enc)
            logp = torch.log_softmax(out.logits[0], dim=-1).tolist()
            for v, lp in enumerate(logp):
                if v in (model.pad_id, model.bos_id) or lp == -math.inf:
                    continue
                if v == model.eos_id and t < cfg.min_len and t < max_len:
                    continue
                if v != model.eos_id and (t >= max_len or (
                        cfg.no_repeat_ngram and repeats_ngram(beam.tokens + [v], cfg.no_repeat_ngram))):
                    continue
                attention = beam.attention + ([] if out.attention is None else [out.attention[0, :src_len]])
                candidates.append((beam.log_prob + lp, beam.tokens + [v], out.state, attention))
        candidates.sort(key=lambda c: -c[0])
        top = candidates[:2 * k]
        for log_prob, tokens, _, attention in top[:k]:
            if tokens[-1] == model.eos_id:
                attn = torch.stack(attention) if attention else None
                finished.append(Hypothesis(tokens[:-1], gnmt_score(log_prob, t, attn, cfg), log_prob, attn))
        live = [_Beam(tokens, log_prob, state, attention)
                for log_prob, tokens, state, attention in top if tokens[-1] != model.eos_id][:k]
        if not live or (cfg.stopping == "beam" and len(finished) >= k):
            break
    return sorted(finished, key=lambda h: -h.score)[:cfg.n_best]


# ---------------------------------------------------------------------------------------------
# Beam size 1, brute force, reference loop


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("extra", [{}, {"min_len": 2, "no_repeat_ngram": 2}], ids=["plain-cfg", "constrained"])
def test_beam_size_one_equals_greedy(decoder: str, extra: dict) -> None:
    model = tiny_model(decoder)
    src, lengths = padded_batch([6, 3, 5, 1])
    cfg = DecodeConfig(max_len_a=1.0, max_len_b=2, **extra)
    greedy = greedy_search(model, src, lengths, cfg)
    beam = beam_search(model, src, lengths, cfg.model_copy(update={"beam_size": 1}))
    assert any(len(h.tokens) > 0 for h in greedy)  # the comparison is not about empty outputs
    for g, b in zip(greedy, beam):
        assert len(b) == 1
        assert b[0].tokens == g.tokens
        # beam search drops finished sentences from its batch: smaller GEMMs round the last bits
        # differently, so equal up to float rounding
        assert b[0].score == pytest.approx(g.score, rel=1e-6) and b[0].log_prob == pytest.approx(g.log_prob, rel=1e-6)
        if g.attention is not None:
            torch.testing.assert_close(b[0].attention, g.attention, rtol=1e-5, atol=1e-7)


def test_greedy_scores_with_the_gnmt_formula_and_teacher_forced_log_probs() -> None:
    model = tiny_model("luong")
    src, lengths = padded_batch([6, 3])
    cfg = DecodeConfig(length_penalty=0.7, coverage_penalty=0.3, max_len_a=1.0, max_len_b=2)
    for b, h in enumerate(greedy_search(model, src, lengths, cfg)):
        log_prob, _ = teacher_forced(model, src[b:b + 1], int(lengths[b]), [h.tokens])
        assert h.log_prob == pytest.approx(log_prob.item(), rel=1e-5)
        assert h.score == pytest.approx(gnmt_score(h.log_prob, len(h.tokens), h.attention, cfg), rel=1e-5)


def test_search_dispatches_beam_one_to_greedy() -> None:
    model = tiny_model()
    src, lengths = padded_batch([4, 2])
    greedy = greedy_search(model, src, lengths, DecodeConfig())
    assert [hs[0].tokens for hs in search(model, src, lengths, DecodeConfig())] == [h.tokens for h in greedy]


@pytest.mark.parametrize("alpha,beta", [(0.0, 0.0), (1.0, 0.0), (0.6, 0.3)])
def test_wide_beam_equals_brute_force_on_tiny_vocabulary(alpha: float, beta: float) -> None:
    # Real tokens A..D (4), max 3 tokens: 1 + 4 + 16 + 64 = 85 outputs. At most 16 * 5 = 80
    # extensions exist at any step, so a beam of 85 keeps every prefix and every EOS.
    model = tiny_model("luong", tgt_vocab=7)
    src, lengths = padded_batch([4])
    cfg = DecodeConfig(beam_size=85, n_best=85, max_len_a=0.0, max_len_b=3, min_len=0,
                       length_penalty=alpha, coverage_penalty=beta)
    outputs = [list(seq) for n in range(4) for seq in itertools.product([A, B, C, D], repeat=n)]
    log_probs, attention = teacher_forced(model, src, 4, outputs)
    brute = {tuple(out): gnmt_score(lp, len(out), attention[i, :len(out) + 1], cfg)
             for i, (out, lp) in enumerate(zip(outputs, log_probs.tolist()))}

    everything = beam_search(model, src, lengths, cfg)[0]
    assert sorted(tuple(h.tokens) for h in everything) == sorted(brute)
    for h in everything:
        assert h.score == pytest.approx(brute[tuple(h.tokens)], rel=1e-5)
    assert [h.score for h in everything] == sorted((h.score for h in everything), reverse=True)

    best = beam_search(model, src, lengths, cfg.model_copy(update={"n_best": 1}))[0]
    assert tuple(best[0].tokens) == max(brute, key=brute.get)


@pytest.mark.parametrize("decoder", ["luong", "bahdanau"])
@pytest.mark.parametrize("extra", [
    {"beam_size": 4, "n_best": 3},
    {"beam_size": 3, "n_best": 2, "length_penalty": 0.8, "coverage_penalty": 0.4, "min_len": 2,
     "no_repeat_ngram": 2},
], ids=["default", "penalties+constraints"])
def test_vectorised_beam_equals_reference_loop(decoder: str, extra: dict) -> None:
    model = tiny_model(decoder)
    src, lengths = padded_batch([5, 2, 4])
    cfg = DecodeConfig(max_len_a=0.5, max_len_b=3, **extra)
    batched = beam_search(model, src, lengths, cfg)
    for b, n in enumerate(lengths.tolist()):
        assert_same_hypotheses(batched[b], reference_beam_search(model, src[b], n, cfg))


@pytest.mark.parametrize("vocab", [8000, 7929])  # a whole number of _TOPK_CHUNK columns, and a short last chunk
@pytest.mark.parametrize("k", [10, 4])
def test_row_topk_equals_topk_on_wide_rows(vocab: int, k: int) -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.log_softmax(torch.randn(6, vocab, generator=gen) * 4, dim=-1)
    x[1, :] = -math.inf  # a forced-EOS row: one finite value, in the short last chunk
    x[1, vocab - 1] = -0.5
    x[2, :] = -math.inf  # and one whose finite value is in the first chunk
    x[2, 2] = -0.1
    x[3, -30:] = 5.0 + torch.arange(30.0)  # the best values all in the last chunk(s)
    values, columns = _row_topk(x, k)
    want_values, want_columns = x.topk(k, dim=1)
    assert torch.equal(values, want_values)
    assert ((columns >= 0) & (columns < vocab)).all()
    finite = torch.isfinite(want_values)  # -inf values may name any column; real ones name their own
    assert torch.equal(columns[finite], want_columns[finite])
    assert torch.equal(x.gather(1, columns), values)


@pytest.mark.parametrize("extra", [{}, {"min_len": 2, "no_repeat_ngram": 1}], ids=["plain-cfg", "constrained"])
def test_beam_over_a_wide_vocabulary_equals_reference_loop(extra: dict) -> None:
    """3,000 target tokens with beam 3: each beam's candidates come from _row_topk's two levels."""
    assert 3000 >= _TWO_LEVEL_MIN_VOCAB_PER_CANDIDATE * 2 * 3
    model = tiny_model("luong", tgt_vocab=3000)
    src, lengths = padded_batch([5, 2, 4])
    cfg = DecodeConfig(beam_size=3, n_best=3, max_len_a=0.5, max_len_b=3, **extra)
    batched = beam_search(model, src, lengths, cfg)
    for b, n in enumerate(lengths.tolist()):
        assert_same_hypotheses(batched[b], reference_beam_search(model, src[b], n, cfg))


def count_rows_per_step(model, monkeypatch) -> list[int]:
    """The list that will hold how many decoder rows each model.step call gets."""
    rows_per_step, original = [], model.step

    def step(prev, state, enc):
        rows_per_step.append(prev.size(0))
        return original(prev, state, enc)

    monkeypatch.setattr(model, "step", step)
    return rows_per_step


@pytest.mark.parametrize("alpha", [0.0, 0.8])  # with alpha > 0 each sentence's lp(max_len + 1) leaves with it
def test_finished_sentences_leave_the_batch_without_changing_any_result(monkeypatch, alpha: float) -> None:
    model = tiny_model("luong")
    src, lengths = padded_batch([6, 1, 4])
    cfg = DecodeConfig(beam_size=3, n_best=2, max_len_a=1.0, max_len_b=1,  # max lengths 7, 2, 5
                       length_penalty=alpha)
    rows_per_step = count_rows_per_step(model, monkeypatch)
    batched = beam_search(model, src, lengths, cfg)
    # the first step once per sentence (the beams start as copies), then 3 sentences x 3 beams,
    # then fewer as sentences end, the longest alone at last
    assert rows_per_step[:2] == [3, 9] and rows_per_step[-1] == 3
    assert rows_per_step[1:] == sorted(rows_per_step[1:], reverse=True)
    for b, n in enumerate(lengths.tolist()):
        assert_same_hypotheses(batched[b], reference_beam_search(model, src[b], n, cfg))


def test_greedy_drops_finished_sentences_too(monkeypatch) -> None:
    model = tiny_model("bahdanau")
    src, lengths = padded_batch([6, 1, 4])
    cfg = DecodeConfig(max_len_a=1.0, max_len_b=1, coverage_penalty=0.2)  # max lengths 7, 2, 5
    alone = [greedy_search(model, src[b:b + 1, :n], lengths[b:b + 1], cfg)[0] for b, n in enumerate(lengths.tolist())]
    rows_per_step = count_rows_per_step(model, monkeypatch)
    together = greedy_search(model, src, lengths, cfg)
    assert rows_per_step[0] == 3 and rows_per_step[-1] == 1 and rows_per_step == sorted(rows_per_step, reverse=True)
    assert_same_hypotheses(together, alone)


def test_hypotheses_match_teacher_forced_log_probs_and_attention() -> None:
    model = tiny_model("bahdanau")
    src, lengths = padded_batch([5, 3])
    for b, hyps in enumerate(beam_search(model, src, lengths, DecodeConfig(beam_size=3, n_best=3))):
        n = int(lengths[b])
        log_probs, attention = teacher_forced(model, src[b:b + 1], n, [h.tokens for h in hyps])
        for i, h in enumerate(hyps):
            assert h.log_prob == pytest.approx(log_probs[i].item(), rel=1e-5)
            assert h.attention.shape == (len(h.tokens) + 1, n)
            torch.testing.assert_close(h.attention, attention[i, :len(h.tokens) + 1], rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# The scripted decoder: beams by hand

def test_scripted_beam_gives_hand_computed_hypotheses() -> None:
    # Beam 2, n_best 2 (probabilities, not logs):
    # step 0: from BOS: A .6, B .4                                 -> live A .6, B .4
    # step 1: B EOS .4*.9=.36, A B .6*.5=.30, A EOS .6*.3=.18, A A .6*.2=.12 (the top 2*2)
    #         "B" .36 is EOS within the top 2: finished. "A" .18 ranks 3rd, below the beam: dropped.
    #                                                              -> live A B .30, A A .12
    # step 2: A B EOS .30*.5=.15, A B A .09, A A EOS .12*.6=.072, A B B .06
    #         "A B" .15 finished.                                  -> live A B A .09, A B B .06
    # Finished {B .36, A B .15}; no live beam (best .09) can beat .15, so search stops here.
    model = ScriptedModel(HAND_TABLE)
    src, lengths = one_source()
    hyps = beam_search(model, src, lengths, DecodeConfig(beam_size=2, n_best=2, max_len_a=0, max_len_b=10))[0]
    assert [h.tokens for h in hyps] == [[B], [A, B]]
    assert [h.log_prob for h in hyps] == pytest.approx([math.log(0.36), math.log(0.15)])
    assert [h.score for h in hyps] == pytest.approx([math.log(0.36), math.log(0.15)])
    assert hyps[0].attention is None
    # Greedy commits to A (.6), then B (.5), then EOS (.5): .15, worse than the beam's .36.
    greedy = greedy_search(model, src, lengths, DecodeConfig(max_len_a=0, max_len_b=10))[0]
    assert greedy.tokens == [A, B] and greedy.log_prob == pytest.approx(math.log(0.15))


def test_beam_stops_once_no_live_hypothesis_can_win() -> None:
    model = ScriptedModel(HAND_TABLE)
    src, lengths = one_source()
    beam_search(model, src, lengths, DecodeConfig(beam_size=2, n_best=2, max_len_a=0, max_len_b=50))
    assert model.steps == 3  # the three steps worked out above, not max_len + 1 = 51


@pytest.mark.parametrize("alpha,rows,want", [
    # alpha 0: "" finishes first with .3, but the live "A" (.7) may still finish higher: it does, .7*.9=.63.
    (0.0, {(): {A: 0.7, EOS: 0.3}, (A,): {EOS: 0.9, A: 0.1}}, ([A], math.log(0.63))),
    # alpha 1: "" finishes with log .5 = -0.693; the live "A" has log .48 = -0.734 < -0.693, yet with
    # lp(2) = 7/6 it can still win, and does: log(.48*.99) * 6/7 = -0.638.
    (1.0, {(): {EOS: 0.5, A: 0.48, B: 0.02}, (A,): {EOS: 0.99, A: 0.01}}, ([A], math.log(0.48 * 0.99) * 6 / 7)),
], ids=["no-penalty", "length-penalty"])
def test_beam_does_not_stop_while_a_live_hypothesis_can_still_win(alpha: float, rows: dict, want: tuple) -> None:
    src, lengths = one_source()
    # max_len 1 makes the bound as tight as it gets: lp(1 token + EOS) = 7/6.
    cfg = DecodeConfig(beam_size=2, n_best=1, length_penalty=alpha, max_len_a=0, max_len_b=1)
    (best,) = beam_search(ScriptedModel(table(rows)), src, lengths, cfg)[0]
    assert best.tokens == want[0] and best.score == pytest.approx(want[1])


@pytest.mark.parametrize("search_one", [False, True], ids=["batched", "one-sentence"])
def test_stop_beam_ends_once_beam_hypotheses_finished_where_exact_searches_on(search_one: bool) -> None:
    """Beam 2, power penalty 1, max_len 2 (probabilities):
    step 0: EOS .5, A .45, B .05: "" finishes (1 finished; score log .5 = -0.693) -> live A, B
    step 1: A A .405, B EOS .05, A EOS .045: "B" finishes (2 finished)              -> live A A
    stopping "beam" ends here, best "" (-0.693); stopping "exact" goes on, as A A (log .405 = -0.904) may
    still win over lp(3) = 3: step 2: A A EOS .405 scores -0.301, the best."""
    rows = {(): {EOS: 0.5, A: 0.45, B: 0.05}, (A,): {EOS: 0.1, A: 0.9}, (B,): {EOS: 1.0}, (A, A): {EOS: 1.0}}
    src, lengths = one_source()
    found = {}
    for stop in ("exact", "beam"):
        model = ScriptedModel(table(rows))
        cfg = DecodeConfig(beam_size=2, n_best=2, length_penalty=1.0, length_norm="power", min_len=0, max_len_a=0,
                           max_len_b=2, stopping=stop)
        found[stop] = beam_search_one(model, src, lengths, cfg) if search_one else beam_search(model, src, lengths, cfg)[0]
        found[stop + " steps"] = model.steps
    assert [h.tokens for h in found["exact"]] == [[A, A], []] and found["exact steps"] == 3
    assert found["exact"][0].score == pytest.approx(math.log(0.405) / 3)
    assert [h.tokens for h in found["beam"]] == [[], [B]] and found["beam steps"] == 2
    assert [h.score for h in found["beam"]] == pytest.approx([math.log(0.5), math.log(0.05) / 2])


@pytest.mark.parametrize("extra", [{"beam_size": 3, "n_best": 2, "length_penalty": 1.0},
                                   {"beam_size": 4, "n_best": 1, "length_penalty": 0.0, "min_len": 0},
                                   {"beam_size": 2, "n_best": 2, "length_penalty": 2.0, "no_repeat_ngram": 2}],
                         ids=["gnmt1", "no-penalty", "gnmt2-ngram"])
def test_stop_beam_equals_the_reference_loop_that_stops_once_beam_finished(extra: dict) -> None:
    """Batched and one-sentence searches with stopping "beam" give the reference loop's hypotheses, which
    stops once `beam` EOS among a step's best `beam` finished; at alpha 2 some best differs from
    stopping "exact"'s."""
    differ = 0
    for decoder in ("luong", "bahdanau"):
        model = tiny_model(decoder)
        src, lengths = padded_batch([5, 2, 4, 7, 3])
        cfg = DecodeConfig(max_len_a=1.0, max_len_b=4, stopping="beam", **extra)
        batched = beam_search(model, src, lengths, cfg)
        exact = beam_search(model, src, lengths, cfg.model_copy(update={"stopping": "exact"}))
        for b, n in enumerate(lengths.tolist()):
            want = reference_beam_search(model, src[b], n, cfg)
            assert_same_hypotheses(batched[b], want)
            assert_same_hypotheses(beam_search_one(model, src[b:b + 1, :n], lengths[b:b + 1], cfg), want)
            differ += [h.tokens for h in exact[b]] != [h.tokens for h in batched[b]]
    assert differ or extra["length_penalty"] < 2.0


# ---------------------------------------------------------------------------------------------
# Penalties


def test_length_penalty_follows_gnmt_formula() -> None:
    # lp = ((5 + |Y|) / 6)^alpha: |Y|=1 -> 1; |Y|=2 -> 7/6; |Y|=7, alpha=.5 -> sqrt(12/6) = sqrt 2
    lengths = torch.tensor([1, 2, 7])
    assert length_penalty(lengths, 1.0).tolist() == pytest.approx([1.0, 7 / 6, 2.0])
    assert length_penalty(lengths, 0.5)[2].item() == pytest.approx(math.sqrt(2))
    assert length_penalty(lengths, 0.0).tolist() == [1.0, 1.0, 1.0]


def test_coverage_penalty_follows_gnmt_formula_over_real_positions() -> None:
    # cp = beta * sum_i log(min(sum_j a_ij, 1)): coverage (1.8, .2 | pad 0) -> .2 * (log 1 + log .2);
    # the padding position would add log(0) if it counted. Coverage >= 1 everywhere -> 0.
    attn_sum = torch.tensor([[1.8, 0.2, 0.0], [2.5, 1.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    assert coverage_penalty(attn_sum, mask, 0.2).tolist() == pytest.approx([0.2 * math.log(0.2), 0.0])
    assert coverage_penalty(attn_sum, mask, 0.0).tolist() == [0.0, 0.0]


def test_length_penalty_reranks_finished_hypotheses() -> None:
    # Finished: ""  log .5               |Y|=1, lp = 1:   alpha 0: -0.6931  alpha 1: -0.6931
    #           "A" log(.48*.95)=log .456 |Y|=2, lp = 7/6: alpha 0: -0.7853  alpha 1: -0.7853*6/7 = -0.6731
    model = ScriptedModel(table({(): {EOS: 0.5, A: 0.48, B: 0.02}, (A,): {EOS: 0.95, A: 0.03, B: 0.02}}))
    src, lengths = one_source()
    cfg = DecodeConfig(beam_size=2, n_best=2, max_len_a=0, max_len_b=10, min_len=0)
    plain = beam_search(model, src, lengths, cfg)[0]
    assert [h.tokens for h in plain] == [[], [A]]
    assert [h.score for h in plain] == pytest.approx([math.log(0.5), math.log(0.456)])
    penalised = beam_search(model, src, lengths, cfg.model_copy(update={"length_penalty": 1.0}))[0]
    assert [h.tokens for h in penalised] == [[A], []]
    assert [h.score for h in penalised] == pytest.approx([math.log(0.456) * 6 / 7, math.log(0.5)])
    assert [h.log_prob for h in penalised] == pytest.approx([math.log(0.456), math.log(0.5)])


def test_coverage_penalty_reranks_by_attention() -> None:
    # Source: 2 real positions + 1 padding. Both A and B end right after one token.
    # "A": rows (.9,.1) then (.9,.1): coverage (1.8, .2) -> cp = .2 * log .2 = -0.3219
    # "B": rows (.9,.1) then (.1,.9): coverage (1.0, 1.0) -> cp = 0
    # beta 0:  A log .5 = -0.6931 beats B log .45 = -0.7985
    # beta .2: A -0.6931 - 0.3219 = -1.0150 loses to B -0.7985
    attention = {(): [0.9, 0.1], (A,): [0.9, 0.1], (B,): [0.1, 0.9]}
    model = ScriptedModel(table({(): {A: 0.5, B: 0.45, EOS: 0.05}}),
                          attention=lambda prefix: attention.get(prefix, [0.5, 0.5]))
    src, lengths = torch.full((1, 3), A), torch.tensor([2])
    cfg = DecodeConfig(beam_size=3, n_best=2, max_len_a=0, max_len_b=10)
    assert [h.tokens for h in beam_search(model, src, lengths, cfg)[0]] == [[A], [B]]
    hyps = beam_search(model, src, lengths, cfg.model_copy(update={"coverage_penalty": 0.2}))[0]
    assert [h.tokens for h in hyps] == [[B], [A]]
    assert [h.score for h in hyps] == pytest.approx([math.log(0.45), math.log(0.5) + 0.2 * math.log(0.2)])
    torch.testing.assert_close(hyps[1].attention, torch.tensor([[0.9, 0.1], [0.9, 0.1]]))  # padding cut
    greedy = greedy_search(model, src, lengths, cfg.model_copy(update={"beam_size": 1, "n_best": 1,
                                                                      "coverage_penalty": 0.2}))[0]
    assert greedy.tokens == [A] and greedy.score == pytest.approx(math.log(0.5) + 0.2 * math.log(0.2))


def test_coverage_penalty_without_attention_is_a_config_error() -> None:
    src, lengths = padded_batch([3])
    with pytest.raises(ConfigError, match="coverage_penalty"):
        beam_search(tiny_model("plain"), src, lengths, DecodeConfig(beam_size=2, coverage_penalty=0.2))


# ---------------------------------------------------------------------------------------------
# Constraints: n-grams, lengths


def loves_repeating(prefix: tuple[int, ...]) -> dict[int, float]:
    """The last token again with p .7; EOS is nearly impossible."""
    last = prefix[-1] if prefix else A
    return {**{t: 0.09 for t in (A, B, C, D)}, last: 0.7, EOS: 0.03 - 0.0001 * len(prefix)}


@pytest.mark.parametrize("n", [1, 2, 3])
def test_ngram_blocking_never_emits_a_repeated_ngram(n: int) -> None:
    src, lengths = one_source(4)
    length = 4 if n == 1 else 8  # 4 real tokens allow at most 4 distinct unigrams
    cfg = DecodeConfig(min_len=length, max_len_a=0, max_len_b=length, beam_size=3, n_best=3)
    free = beam_search(ScriptedModel(loves_repeating), src, lengths, cfg)[0]
    assert all(repeats_ngram(h.tokens, n) for h in free)  # the fake really does love repeating
    blocked = cfg.model_copy(update={"no_repeat_ngram": n})
    beam = beam_search(ScriptedModel(loves_repeating), src, lengths, blocked)[0]
    greedy = greedy_search(ScriptedModel(loves_repeating), src, lengths, blocked)[0]
    for h in beam + [greedy]:
        assert len(h.tokens) == length and not repeats_ngram(h.tokens, n)


def never_ends(prefix: tuple[int, ...]) -> dict[int, float]:
    return {A: 0.5, B: 0.4999, EOS: 0.0001}


@pytest.mark.parametrize("beam_size", [1, 3])
def test_max_len_is_respected_per_sentence(beam_size: int) -> None:
    # floor(1.5 * 2 + 0) = 3 and floor(1.5 * 5 + 0) = 7 tokens, then EOS is forced. A min_len out
    # of reach makes every hypothesis run into its max_len (max_len wins the clash).
    src, lengths = torch.full((2, 5), A), torch.tensor([2, 5])
    cfg = DecodeConfig(beam_size=beam_size, n_best=beam_size, max_len_a=1.5, max_len_b=0, min_len=50)
    results = search(ScriptedModel(never_ends), src, lengths, cfg)
    for hyps, limit in zip(results, [3, 7]):
        assert [len(h.tokens) for h in hyps] == [limit] * beam_size
        # all A's; the forced EOS keeps its model log-prob: .5 per A, .0001 for EOS
        assert hyps[0].tokens == [A] * limit
        assert hyps[0].log_prob == pytest.approx(limit * math.log(0.5) + math.log(0.0001), rel=1e-5)
    # Without min_len, nothing is longer than its limit either.
    for hyps, limit in zip(search(ScriptedModel(never_ends), src, lengths, cfg.model_copy(update={"min_len": 0})),
                           [3, 7]):
        assert all(len(h.tokens) <= limit for h in hyps)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_min_len_is_respected_and_max_len_wins_a_clash(beam_size: int) -> None:
    src, lengths = one_source()
    cfg = DecodeConfig(beam_size=beam_size, n_best=beam_size, max_len_a=0, max_len_b=10)
    # By default (min_len 1) a decoder that puts EOS first still gives a non-empty translation ...
    assert all(len(h.tokens) >= 1 for h in search(ScriptedModel(loves_eos), src, lengths, cfg)[0])
    # ... and min_len 0 lets it end at step 0, as asked.
    empty = cfg.model_copy(update={"min_len": 0})
    assert search(ScriptedModel(loves_eos), src, lengths, empty)[0][0].tokens == []
    for hyps in search(ScriptedModel(loves_eos), src, lengths, cfg.model_copy(update={"min_len": 3})):
        assert hyps[0].tokens == [A, A, A]
        assert all(len(h.tokens) >= 3 for h in hyps)
    clash = cfg.model_copy(update={"min_len": 5, "max_len_b": 2})
    assert all(len(h.tokens) == 2 for h in search(ScriptedModel(loves_eos), src, lengths, clash)[0])


# ---------------------------------------------------------------------------------------------
# Beam search for one sentence (its bookkeeping on host lists)


def assert_identical(got: list[Hypothesis], want: list[Hypothesis]) -> None:
    """The same hypotheses to the bit: tokens, scores, log-probs and attention."""
    assert [(h.tokens, h.score, h.log_prob) for h in got] == [(h.tokens, h.score, h.log_prob) for h in want]
    for g, w in zip(got, want):
        assert (g.attention is None) == (w.attention is None)
        if w.attention is not None:
            assert torch.equal(g.attention, w.attention)


ONE_SENTENCE_CONFIGS = {
    "beam3": {"beam_size": 3},
    "nbest": {"beam_size": 5, "n_best": 5, "length_penalty": 1.0, "forbid_unk": True},
    "penalties+constraints": {"beam_size": 3, "n_best": 2, "length_penalty": 0.8, "coverage_penalty": 0.4,
                              "min_len": 2, "no_repeat_ngram": 2},
    "eos-late": {"beam_size": 2, "min_len": 6},
}


@pytest.mark.parametrize("kind,name", [(kind, name) for kind in MODEL_KINDS for name, extra in ONE_SENTENCE_CONFIGS.items()
                                       if kind != "plain" or not extra.get("coverage_penalty")])  # it needs attention
@pytest.mark.parametrize("forced", [[], [A, B]], ids=["free", "prefix"])
def test_one_sentence_beam_gives_the_batched_beam_to_the_bit(kind: str, name: str, forced: list[int]) -> None:
    extra = ONE_SENTENCE_CONFIGS[name]
    model = tiny_model(kind)
    src, lengths = padded_batch([7, 2, 5, 1])
    cfg = DecodeConfig(max_len_a=1.0, max_len_b=3, **extra)
    for b, n in enumerate(lengths.tolist()):
        one = src[b:b + 1, :n], lengths[b:b + 1]
        prefix = Prefix.of([forced], pad_id=model.pad_id) if forced else None
        want = beam_search(model, *one, cfg, prefix=prefix)[0]
        got = beam_search_one(model, *one, cfg, prefix=prefix)
        assert got, "every config here finishes something"
        assert_identical(got, want)
        assert all(h.tokens[:len(forced)] == forced for h in got)


def test_one_sentence_beam_over_a_wide_vocabulary_and_as_wide_as_all_prefixes() -> None:
    """_select_top's two-level top-k (3,000 tokens), and a beam of 85 over a 7-token vocabulary
    (2 * beam candidates exceed one row's vocabulary at the first step)."""
    model = tiny_model("luong", tgt_vocab=3000)
    src, lengths = padded_batch([5])
    cfg = DecodeConfig(beam_size=3, n_best=3, max_len_a=0.5, max_len_b=3, min_len=2, no_repeat_ngram=1)
    assert_identical(beam_search_one(model, src, lengths, cfg), beam_search(model, src, lengths, cfg)[0])
    assert_same_hypotheses(beam_search_one(model, src, lengths, cfg), reference_beam_search(model, src[0], 5, cfg))
    model = tiny_model("luong", tgt_vocab=7)
    src, lengths = padded_batch([4])
    cfg = DecodeConfig(beam_size=85, n_best=85, max_len_a=0.0, max_len_b=3, min_len=0, length_penalty=0.6)
    got = beam_search_one(model, src, lengths, cfg)
    assert len(got) == 85  # 1 + 4 + 16 + 64 outputs of real tokens A..D
    assert_identical(sorted(got, key=lambda h: h.tokens), sorted(beam_search(model, src, lengths, cfg)[0],
                                                                 key=lambda h: h.tokens))


def test_one_sentence_beam_on_the_scripted_table_gives_the_hand_computed_hypotheses() -> None:
    model = ScriptedModel(HAND_TABLE)
    src, lengths = one_source()
    cfg = DecodeConfig(beam_size=2, n_best=2, max_len_a=0.0, max_len_b=4)
    assert_identical(beam_search_one(model, src, lengths, cfg), beam_search(model, src, lengths, cfg)[0])


def test_search_sends_one_sentence_on_the_cpu_to_the_host_beam_and_traced_ones_to_beam_search(monkeypatch) -> None:
    import heed.search as search_module
    model = tiny_model("luong")
    src, lengths = padded_batch([5, 3])
    cfg = DecodeConfig(beam_size=3)
    calls: list[str] = []
    for name in ("beam_search", "beam_search_one"):
        original = getattr(search_module, name)
        monkeypatch.setattr(search_module, name,
                            lambda *a, _name=name, _f=original, **k: calls.append(_name) or _f(*a, **k))
    search(model, src[:1], lengths[:1], cfg)
    search(model, src, lengths, cfg)  # a batch of two
    search(model, src[:1], lengths[:1], cfg, trees=[])  # the explorer's tree needs beam_search's record
    assert calls == ["beam_search_one", "beam_search", "beam_search"]


# ---------------------------------------------------------------------------------------------
# Batching and n-best


@pytest.mark.parametrize("beam_size", [1, 4])
def test_a_sentence_decodes_the_same_alone_as_in_a_padded_batch(beam_size: int) -> None:
    model = tiny_model("luong")
    src, lengths = padded_batch([7, 3, 5, 1])
    cfg = DecodeConfig(beam_size=beam_size, n_best=min(beam_size, 2), length_penalty=0.6,
                       max_len_a=1.0, max_len_b=2)
    batched = search(model, src, lengths, cfg)
    for b, n in enumerate(lengths.tolist()):
        alone = search(model, src[b:b + 1, :n], lengths[b:b + 1], cfg)[0]
        assert_same_hypotheses(batched[b], alone)


def test_n_best_hypotheses_are_distinct_and_sorted_by_score() -> None:
    model = tiny_model("bahdanau")
    src, lengths = padded_batch([6, 4])
    for hyps in beam_search(model, src, lengths, DecodeConfig(beam_size=5, n_best=5, length_penalty=1.0)):
        assert len(hyps) == 5
        assert len({tuple(h.tokens) for h in hyps}) == 5
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)


def test_decode_config_rejects_unknown_keys_and_n_best_above_beam() -> None:
    with pytest.raises(ValidationError):
        DecodeConfig(beam=5)
    with pytest.raises(ValidationError, match="n_best"):
        DecodeConfig(beam_size=2, n_best=3)
    with pytest.raises(ValidationError, match="stopping"):
        DecodeConfig(stopping="early")
