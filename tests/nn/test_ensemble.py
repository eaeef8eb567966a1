"""heed.nn.ensemble: decoding with the mean of several models' log-probabilities through the unchanged
search. An ensemble of a model with itself is that model; two scripted models give the hand-computed
product of experts; heed.load / `heed translate` / `heed evaluate` take several models and refuse
models that do not share tokenizers and vocabularies."""
from __future__ import annotations

import math

import pytest
import torch
from model_files import swapped_vocab_copy
from search_fakes import (  # noqa: F401  (one_thread: an autouse fixture, used by importing it)
    BOS,
    DECODERS,
    EOS,
    A,
    B,
    ScriptedModel,
    assert_same_hypotheses,
    one_source,
    one_thread,
    padded_batch,
    table,
    tiny_model,
)

import heed
from heed.errors import HeedError
from heed.nn.ensemble import Ensemble, mean_attention, mean_log_probs
from heed.search import DecodeConfig, Prefix, SearchModel, beam_search, greedy_search, sample

# Two scripted models that disagree; their product of experts, worked by hand:
#   first step:  sqrt(.8 * .5) : sqrt(.2 * .5) = 2 : 1       -> p(A) = 2/3, p(B) = 1/3
#   after A:     sqrt(.5 * .9) : sqrt(.5 * .1) = 3 : 1       -> p(EOS) = 3/4, p(B) = 1/4
#   after B, and after A B: both give EOS probability 1      -> p(EOS) = 1
FIRST = table({(): {A: 0.8, B: 0.2}, (A,): {EOS: 0.5, B: 0.5}})
SECOND = table({(): {A: 0.5, B: 0.5}, (A,): {EOS: 0.9, B: 0.1}})
HAND = DecodeConfig(beam_size=2, n_best=2, max_len_a=0.0, max_len_b=5)


def test_an_ensemble_meets_the_search_protocol():
    assert isinstance(Ensemble([ScriptedModel(FIRST), ScriptedModel(SECOND)]), SearchModel)


def test_a_step_gives_the_mean_of_the_members_log_probabilities():
    first, second = ScriptedModel(FIRST), ScriptedModel(SECOND)
    ensemble = Ensemble([first, second])
    src, lengths = one_source()
    enc = ensemble.encode(src, lengths)
    out = ensemble.step(torch.tensor([BOS]), ensemble.init_state(enc), enc)
    expected = (math.log(0.8) + math.log(0.5)) / 2, (math.log(0.2) + math.log(0.5)) / 2
    assert out.logits[0, A].item() == pytest.approx(expected[0], abs=1e-6)
    assert out.logits[0, B].item() == pytest.approx(expected[1], abs=1e-6)
    assert torch.isneginf(out.logits[0, EOS])  # neither model gives EOS at the start
    # What search ranks by (it log-softmaxes a step's logits): the normalised geometric mean.
    probs = torch.softmax(out.logits[0], dim=-1)
    assert probs[A].item() == pytest.approx(2 / 3, abs=1e-6) and probs[B].item() == pytest.approx(1 / 3, abs=1e-6)
    assert first.steps == second.steps == 1


def test_greedy_search_over_two_scripted_models_gives_the_hand_computed_hypothesis():
    [best] = greedy_search(Ensemble([ScriptedModel(FIRST), ScriptedModel(SECOND)]), *one_source(),
                           DecodeConfig(max_len_a=0.0, max_len_b=5))
    assert best.tokens == [A]
    assert best.log_prob == pytest.approx(math.log(2 / 3 * 3 / 4), abs=1e-6)  # log 1/2


def test_beam_search_over_two_scripted_models_gives_the_hand_computed_n_best_list():
    [nbest] = beam_search(Ensemble([ScriptedModel(FIRST), ScriptedModel(SECOND)]), *one_source(), HAND)
    # [A]: 2/3 * 3/4 = 1/2; [B]: 1/3 * 1 = 1/3; [A, B]: 2/3 * 1/4 * 1 = 1/6 falls off a beam of 2.
    assert [h.tokens for h in nbest] == [[A], [B]]
    assert [h.log_prob for h in nbest] == pytest.approx([math.log(1 / 2), math.log(1 / 3)], abs=1e-6)


def test_each_member_alone_would_decode_otherwise():
    """The hand-computed ensemble is not either member: alone, SECOND ranks [B] over [A]."""
    [alone] = beam_search(ScriptedModel(SECOND), *one_source(), HAND)
    assert [h.tokens for h in alone] == [[B], [A]]
    assert [h.log_prob for h in alone] == pytest.approx([math.log(0.5), math.log(0.45)], abs=1e-6)


def test_attention_is_the_mean_over_the_members_that_have_it():
    looks_first = ScriptedModel(FIRST, attention=lambda prefix: [1.0, 0.0])
    looks_both = ScriptedModel(SECOND, attention=lambda prefix: [0.5, 0.5])
    blind = ScriptedModel(SECOND)
    src, lengths = one_source()
    [best] = greedy_search(Ensemble([looks_first, looks_both, blind]), src, lengths,
                           DecodeConfig(max_len_a=0.0, max_len_b=5))
    # Two steps (A, then EOS); the blind member is left out of the mean.
    torch.testing.assert_close(best.attention, torch.tensor([[0.75, 0.25], [0.75, 0.25]]))
    [none] = greedy_search(Ensemble([blind, ScriptedModel(FIRST)]), src, lengths,
                           DecodeConfig(max_len_a=0.0, max_len_b=5))
    assert none.attention is None
    assert mean_attention([None, None]) is None


def test_mean_log_probs_normalises_each_member_first():
    # Logits are not log-probabilities: each member's are log-softmaxed before the mean.
    a, b = torch.tensor([[0.0, 0.0]]), torch.tensor([[5.0, 5.0 + math.log(3)]])
    expected = [(math.log(0.5) + math.log(0.25)) / 2, (math.log(0.5) + math.log(0.75)) / 2]
    torch.testing.assert_close(mean_log_probs([a, b]), torch.tensor([expected]))


@pytest.mark.parametrize("decoder", DECODERS)
def test_an_ensemble_of_a_model_with_itself_gives_its_hypotheses_and_scores(decoder):
    model = tiny_model(decoder)
    pair = Ensemble([model, tiny_model(decoder)])  # two copies with the same weights
    src, lengths = padded_batch([5, 3, 1, 4])
    with torch.no_grad():
        assert_same_hypotheses(greedy_search(pair, src, lengths), greedy_search(model, src, lengths))
        cfg = DecodeConfig(beam_size=4, n_best=3, length_penalty=0.6, max_len_a=1.0, max_len_b=3)
        for got, want in zip(beam_search(pair, src, lengths, cfg), beam_search(model, src, lengths, cfg)):
            assert len(want) == 3
            assert_same_hypotheses(got, want)
        prefix = Prefix.of([[4, 5], [], [6], [4]], pad_id=0)
        for got, want in zip(beam_search(pair, src, lengths, cfg, prefix=prefix),
                             beam_search(model, src, lengths, cfg, prefix=prefix)):
            assert_same_hypotheses(got, want)
        sampling = DecodeConfig(sampling=True, n_best=3, seed=5, max_len_a=1.0, max_len_b=3)
        for got, want in zip(sample(pair, src, lengths, sampling), sample(model, src, lengths, sampling)):
            assert_same_hypotheses(got, want)


def test_the_teacher_forced_pass_is_the_mean_of_the_members_log_probabilities():
    first, second = tiny_model("luong", seed=0), tiny_model("bahdanau", seed=1)
    src, lengths = padded_batch([4, 2])
    tgt_in = torch.tensor([[BOS, 3, 4], [BOS, 5, 0]])
    with torch.no_grad():
        out = Ensemble([first, second])(src, lengths, tgt_in)
        a, b = first(src, lengths, tgt_in), second(src, lengths, tgt_in)
    torch.testing.assert_close(out.logits, (a.logits.log_softmax(-1) + b.logits.log_softmax(-1)) / 2)
    torch.testing.assert_close(out.attention, (a.attention + b.attention) / 2)


def test_members_must_agree_on_special_ids():
    with pytest.raises(ValueError, match="pad, bos, eos"):
        Ensemble([ScriptedModel(FIRST), ScriptedModel(SECOND, eos_id=3)])


# ------------------------------------------------------------------------------ heed.load, CLI


SOURCES = ["3 March 1998", "le 4 mai 2001", "", "12 May 1999"]


def test_heed_load_of_a_model_twice_translates_as_the_model(trained_run):
    single, pair = heed.load(trained_run, device="cpu"), heed.load([trained_run, trained_run / "model"], device="cpu")
    assert isinstance(pair.model, Ensemble) and len(pair.model.members) == 2
    for beam in (1, 3):
        a = single.translate_nbest(SOURCES, beam=beam, n_best=beam)
        b = pair.translate_nbest(SOURCES, beam=beam, n_best=beam)
        assert [[t.tokens for t in n] for n in b] == [[t.tokens for t in n] for n in a]
        assert all(abs(x.score - y.score) < 1e-5 for n, m in zip(a, b) for x, y in zip(n, m))
        assert all(abs(x.attention - y.attention).max() < 1e-5 for n, m in zip(a, b) for x, y in zip(n, m))
    pair_text = ["le 3 mars 1998"], ["1998-03-03"]
    assert pair.align(*pair_text)[0].links == single.align(*pair_text)[0].links
    e, s = pair.explore(SOURCES[:1], beam=3)[0], single.explore(SOURCES[:1], beam=3)[0]
    assert [[tok for tok, _ in step] for step in e.steps] == [[tok for tok, _ in step] for step in s.steps]
    assert pair.model.num_parameters() == 2 * single.model.num_parameters() == 2 * sum(
        p.numel() for p in single.model.parameters())


def test_an_ensemble_of_two_models_scores_by_their_renormalised_mean_log_probabilities(trained_run, tmp_path):
    from heed.checkpoint import load_model_dir, save_model_dir
    from heed.nn.build import build_model

    base = load_model_dir(trained_run)
    torch.manual_seed(3)
    other = build_model(base.config.model, src_vocab_size=len(base.codec.src_vocab),
                        tgt_vocab_size=len(base.codec.tgt_vocab))
    other.eval()  # dropout off, as in the translator
    random_dir = save_model_dir(tmp_path / "random", model=other, config=base.config, codec=base.codec)
    pair = heed.load([trained_run, random_dir], device="cpu")
    got = pair.translate(SOURCES[:1])[0]
    # Its score is the teacher-forced mean of the two models' log-probabilities, renormalised.
    src = torch.tensor([base.codec.encode_src(SOURCES[0]) + [EOS]])
    ids = base.codec.tgt_vocab.encode(got.tokens)
    tgt_in, tgt_out = torch.tensor([[BOS, *ids]]), torch.tensor([[*ids, EOS]])
    with torch.no_grad():
        logits = [m(src, torch.tensor([src.size(1)]), tgt_in).logits for m in (base.model, other)]
    expected = mean_log_probs(logits).log_softmax(-1).gather(2, tgt_out.unsqueeze(2)).sum().item()
    assert got.log_prob == pytest.approx(expected, abs=1e-4)


def test_an_exported_model_can_be_a_member(trained_run, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from heed.export.onnx import export_model

    exported = export_model(trained_run, tmp_path / "onnx")
    single, mixed = heed.load(trained_run, device="cpu"), heed.load([trained_run, exported])
    a, b = single.translate_nbest(SOURCES, beam=3, n_best=2), mixed.translate_nbest(SOURCES, beam=3, n_best=2)
    assert [[t.tokens for t in n] for n in b] == [[t.tokens for t in n] for n in a]
    assert all(abs(x.score - y.score) < 1e-4 for n, m in zip(a, b) for x, y in zip(n, m))


def test_models_with_another_vocabulary_are_refused_naming_the_model(trained_run, tmp_path):
    other = swapped_vocab_copy(trained_run / "model", tmp_path / "swapped")
    with pytest.raises(HeedError, match=r"swapped: the target vocabulary \(id 5 is another token\) differs"):
        heed.load([trained_run, other], device="cpu")
    src_other = swapped_vocab_copy(trained_run / "model", tmp_path / "src-swapped", side="src")
    with pytest.raises(HeedError, match="src-swapped: the source vocabulary"):
        heed.load([trained_run, src_other], device="cpu")


def test_cli_translate_with_two_models_writes_the_models_translations(trained_run, heed_cli):
    text = "\n".join(SOURCES) + "\n"
    single = heed_cli("translate", trained_run, "--beam", 3, "--n-best", 2, input=text)
    pair = heed_cli("translate", trained_run, trained_run, "--beam", 3, "--n-best", 2, input=text)
    assert single.exit_code == 0 and pair.exit_code == 0, pair.output
    # The same hypotheses; the printed scores (4 decimals) may differ in the last digit, as the mean of two
    # equal log-probabilities is renormalised in float32.
    rows = [[line.split(" ||| ") for line in out.stdout.splitlines()] for out in (single, pair)]
    assert len(rows[1]) == 7  # 3 sources x 2 + the empty one
    assert [r[:2] for r in rows[1]] == [r[:2] for r in rows[0]]
    assert all(abs(float(a[2]) - float(b[2])) <= 2e-4 for a, b in zip(*rows))


def test_cli_evaluate_with_two_models_scores_the_ensemble(trained_run, tiny_corpus, heed_cli):
    args = ("--src", tiny_corpus["test_src"], "--ref", tiny_corpus["test_ref"], "--by-length")
    single = heed_cli("evaluate", trained_run, *args)
    pair = heed_cli("evaluate", trained_run, trained_run / "model", *args)
    assert single.exit_code == 0 and pair.exit_code == 0, pair.output
    assert pair.stdout.splitlines()[0] == single.stdout.splitlines()[0] and "BLEU" in pair.stdout
