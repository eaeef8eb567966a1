"""heed.export.ct2 / ct2_run: a heed Transformer exported to CTranslate2 scores every token as the
PyTorch model does (every architecture variant), translates with CTranslate2's search to the same
hypotheses as heed's search, loads through heed.load / the CLI / the server, and refuses in one
line what CTranslate2 cannot do."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

ctranslate2 = pytest.importorskip("ctranslate2")

from served_exports import served_beside_pytorch

import heed
from heed.checkpoint import load_model_dir, save_model_dir
from heed.data.vocab import SPECIALS
from heed.decode_config import DecodeConfig
from heed.errors import ConfigError, HeedError
from heed.export.ct2 import model_files, write_ct2
from heed.export.ct2_run import PROBE_RATE, BeamStops, CT2Seq2Seq, FirstStepEnds, ranking
from heed.export.onnx import MANIFEST_FILE, export_model
from heed.nn.build import ModelConfig, build_model
from heed.plumbing.runtime import cpu_int8_products_exact

VARIANTS = {
    "pre-sinusoidal-tied": {},
    "post-norm": dict(norm="post"),
    "learned-positions-untied": dict(positions="learned", tie_embeddings=False, max_positions=6),
    "shared-embeddings": dict(share_embeddings=True),
}


def _tokens(n: int, prefix: str) -> list[str]:
    return [*SPECIALS, *(f"{prefix}{i}" for i in range(n - len(SPECIALS)))]


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_transformer_variant_scores_each_token_as_pytorch_does(tmp_path, name):
    """CTranslate2's teacher-forced log-probabilities (score_batch) of random targets equal the
    PyTorch model's, for random weights: every weight and option lands where heed reads it. The
    learned table has 6 rows and the sequences are longer: past it both read its last row."""
    spec = VARIANTS[name]
    torch.manual_seed(0)
    vocab = 23
    src_vocab, tgt_vocab = _tokens(vocab, "s"), _tokens(vocab, "s" if spec.get("share_embeddings") else "t")
    cfg = ModelConfig(family="transformer", d_model=16, heads=4, layers=2, ff_size=24, dropout=0.0, **spec)
    model = build_model(cfg, src_vocab_size=vocab, tgt_vocab_size=vocab).eval()
    with torch.no_grad():  # untrained biases and norms are zeros and ones: make them matter
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    codec = SimpleNamespace(src_vocab=SimpleNamespace(tokens=src_vocab), tgt_vocab=SimpleNamespace(tokens=tgt_vocab, unk_id=3))
    write_ct2(model, cfg, codec, tmp_path, max_src_len=20, int8=False)
    written = {p.name for p in tmp_path.iterdir()}
    assert written == set(model_files(written)) and ("shared_vocabulary.json" in written) == (src_vocab == tgt_vocab)

    gen = torch.Generator().manual_seed(1)
    sources = [torch.randint(4, vocab, (n,), generator=gen).tolist() + [2] for n in (9, 3, 1)]
    targets = [torch.randint(4, vocab, (n,), generator=gen).tolist() for n in (8, 11, 2)]
    translator = ctranslate2.Translator(str(tmp_path), device="cpu", intra_threads=1)
    scored = translator.score_batch([[src_vocab[i] for i in s] for s in sources],
                                    [[tgt_vocab[i] for i in t] for t in targets])
    for src, tgt, got in zip(sources, targets, scored):
        with torch.no_grad():
            logits = model(torch.tensor([src]), torch.tensor([len(src)]), torch.tensor([[1, *tgt]])).logits
        expected = logits.log_softmax(-1)[0].gather(1, torch.tensor([*tgt, 2])[:, None]).squeeze(1)
        torch.testing.assert_close(torch.tensor(got.log_probs), expected, atol=2e-4, rtol=0)


@pytest.fixture(scope="module")
def transformer_run(converged_transformer) -> Path:
    """conftest's converged Transformer: outputs well inside max_len, no near-ties."""
    return converged_transformer


@pytest.fixture(scope="module")
def ct2_dir(transformer_run, tmp_path_factory) -> Path:
    return export_model(transformer_run, tmp_path_factory.mktemp("ct2") / "ct2", kind="ctranslate2")


def _sources(tiny_corpus) -> list[str]:
    return tiny_corpus["test_src"].read_text().splitlines()[:16] + [""]


@pytest.mark.parametrize("options", [dict(beam=1), dict(beam=4, n_best=4), dict(beam=4, length_penalty=0.6),
                                     dict(beam=4, n_best=2, length_penalty=1.0),
                                     dict(beam=4, length_penalty=1.0, length_norm="power"),
                                     dict(beam=4, n_best=2, length_penalty=1.0, length_norm="power", stopping="beam")],
                         ids=["greedy", "beam4-nbest4", "beam4-gnmt0.6", "beam4-gnmt1.0-nbest2", "beam4-power1.0",
                              "beam4-power1.0-nbest2-stop-beam"])
def test_heed_load_of_a_ct2_export_gives_pytorchs_hypotheses(transformer_run, ct2_dir, tiny_corpus, options):
    """The same n-best lists, by every path of ranking (min_len 3 sends the fast path's requests to
    heed's ranking); the same scores and log-probabilities, but where CTranslate2 ranks with min_len
    (it renormalises over what a constraint leaves, heed does not); the same attention behind each
    output token and EOS (the last layer's head mean)."""
    exported, pytorch = heed.load(str(ct2_dir)), heed.load(str(transformer_run), device="cpu")
    assert isinstance(exported.model, CT2Seq2Seq)
    sources = _sources(tiny_corpus)
    for min_len in (1, 3, 0):
        a = pytorch.translate_nbest(sources, min_len=min_len, **options)
        b = exported.translate_nbest(sources, min_len=min_len, **options)
        assert [[t.text for t in n] for n in a] == [[t.text for t in n] for n in b]
        assert b[-1][0].text == "" and b[-1][0].tokens == []
    # A source whose beams held PAD or BOS in CTranslate2's first search is searched again with them
    # suppressed, and CTranslate2 then renormalises over the rest: its hypotheses are heed's, its
    # scores shift by the suppressed mass. Every other score is heed's to 1e-4.
    pairs = [(s, t) for x, y in zip(a, b) for s, t in zip(x, y)]
    assert sum(abs(s.score - t.score) < 1e-4 and abs(s.log_prob - t.log_prob) < 1e-4 for s, t in pairs) >= 0.8 * len(pairs)
    assert all(abs(s.log_prob - t.log_prob) < 0.5 for s, t in pairs)
    for s, t in pairs:
        torch.testing.assert_close(torch.from_numpy(t.attention), torch.from_numpy(s.attention), atol=1e-4, rtol=0)


@pytest.mark.parametrize("beam", [1, 4, 5])
def test_a_ct2_export_honours_each_sources_own_length_limit(transformer_run, ct2_dir, tiny_corpus, beam):
    """max_len = floor(a * src_len + b) per source, in one batch of sources of different lengths;
    outputs cut at the limit are heed's, whose search forces EOS on every beam there (CTranslate2
    ranks without a penalty at beam 4; heed ranks at beam 5, with the power penalty)."""
    exported, pytorch = heed.load(str(ct2_dir)), heed.load(str(transformer_run), device="cpu")
    sources = _sources(tiny_corpus)
    options = dict(beam=beam, max_len_a=0.5, max_len_b=1)
    if beam == 5:
        options.update(length_penalty=1.0, length_norm="power")
    got = exported.translate(sources, **options)
    limits = [int(0.5 * (len(exported.codec.src_tokens(s)) + 1) + 1) for s in sources]
    assert all(len(t.tokens) <= limit for t, limit in zip(got, limits))
    assert max(len(t.tokens) for t in got) > min(limits)  # the limits differ, and longer outputs were allowed
    assert [t.tokens for t in got] == [t.tokens for t in pytorch.translate(sources, **options)]
    if beam == 5:  # heed's scores too (CTranslate2 renormalises the first step for min_len 1 where it ranks)
        assert [round(t.score, 4) for t in got] == [round(t.score, 4) for t in pytorch.translate(sources, **options)]


def test_prefixes_and_seeded_sampling_through_a_ct2_export(transformer_run, ct2_dir):
    exported, pytorch = heed.load(str(ct2_dir)), heed.load(str(transformer_run), device="cpu")
    sources = ["le 3 mars 1998", "March 5, 2001"]
    forced = exported.translate(sources, prefix=["2", None], beam=3)
    assert forced[0].tokens[0] == "2"
    assert [t.text for t in forced] == [t.text for t in pytorch.translate(sources, prefix=["2", None], beam=3)]
    beam_stop = dict(prefix=["2", None], beam=3, stopping="beam", length_penalty=1.0, length_norm="power")
    assert ([(t.text, round(t.score, 4)) for t in exported.translate(sources, **beam_stop)]
            == [(t.text, round(t.score, 4)) for t in pytorch.translate(sources, **beam_stop)])
    draw = dict(sampling=True, n_best=3, seed=7, temperature=2.0)
    first, again = exported.translate_nbest(sources, **draw), exported.translate_nbest(sources, **draw)
    assert [[t.text for t in n] for n in first] == [[t.text for t in n] for n in again]
    assert all(len(n) == 3 for n in first)
    assert all(tok not in ("<pad>", "<s>") for n in first for t in n for tok in t.tokens)


@pytest.mark.parametrize("options", [dict(n_best=1), dict(n_best=3)], ids=["best", "nbest3"])
def test_with_a_length_penalty_ctranslate2_searches_on_to_heeds_hypotheses_past_its_own_stop(
        transformer_run, ct2_dir, tiny_corpus, options, monkeypatch):
    """The power penalty at alpha 10 favours long outputs, so heed's search goes on past the step where
    CTranslate2's own search, which stops once `beam` hypotheses finished, returns its best: there
    CTranslate2's own best differs from heed's for some sources, and the export's, which searches
    each source to its limit and ranks by heed's score ("heed"), is heed's for every source, with
    the same n-best lists, scores and log-probabilities. The outputs reach max_len (12 in this model's
    config) with an EOS among the best at CTranslate2's last step, where it leaves out beams that
    heed's search finishes and that could rank: such sources are searched by heed's rule over
    CTranslate2's steps."""
    exported, pytorch = heed.load(str(ct2_dir)), heed.load(str(transformer_run), device="cpu")
    searched = []  # the sources where the search to the limit could not settle the n-best
    search_here = exported.model._searched
    monkeypatch.setattr(exported.model, "_searched", lambda *a: searched.append(a[1]) or search_here(*a))
    sources = _sources(tiny_corpus)[:-1]
    decode = dict(beam=4, length_penalty=10.0, length_norm="power", min_len=1, **options)
    assert ranking(exported.resolve_decode({k: v for k, v in decode.items() if k != "beam"}, beam=4)) == "heed"
    mine, theirs = pytorch.translate_nbest(sources, **decode), exported.translate_nbest(sources, **decode)
    assert [[t.tokens for t in n] for n in theirs] == [[t.tokens for t in n] for n in mine]
    for s, t in zip((t for n in mine for t in n), (t for n in theirs for t in n)):
        assert abs(s.score - t.score) < 1e-4 and abs(s.log_prob - t.log_prob) < 1e-4
    model = exported.model
    eos = model.tgt_tokens[model.eos_id]
    own = []
    for source in sources:  # CTranslate2's own stop and ranking, at heed's limit for the source
        tokens = exported.codec.src_tokens(source)
        result = model._translator().translate_batch([[*tokens, model.src_tokens[model.eos_id]]], beam_size=4,
                                                     patience=1, length_penalty=10.0, min_decoding_length=1,
                                                     max_decoding_length=2 * (len(tokens) + 1) + 10,
                                                     max_input_length=0, return_end_token=True)[0]
        own.append([t for t in result.hypotheses[0] if t != eos])
    assert sum(o != n[0].tokens for o, n in zip(own, mine)) >= 2
    assert searched


def test_ranking_names_the_path_of_each_request():
    """CTranslate2 ranks only where its stop is heed's: with stopping exact, the best alone, no length
    penalty, min_len <= 1; with stopping beam, no penalty or the power one, min_len <= 1, no prefix
    (with the GNMT penalty CTranslate2's ranking by raw sums could leave out one of heed's n-best)."""
    def path(prefixed=False, **fields):
        return ranking(DecodeConfig(**{"beam_size": 5, **fields}), prefixed=prefixed)
    assert path() == path(min_len=0) == path(prefixed=True) == "ctranslate2"
    assert path(beam_size=1) == path(beam_size=1, sampling=True) == "none"
    assert (path(length_penalty=1.0, length_norm="power") == path(length_penalty=0.6) == path(n_best=2)
            == path(min_len=2) == "heed")
    power = dict(length_penalty=1.0, length_norm="power", stopping="beam")
    assert path(**power) == path(**power, n_best=3, min_len=0) == path(stopping="beam", n_best=2) == "ctranslate2"
    assert (path(length_penalty=0.6, stopping="beam") == path(**power, min_len=2) == path(prefixed=True, **power)
            == "heed")


def test_a_stop_beam_result_is_heeds_only_where_its_count_settles_it(ct2_dir):
    """_beam_raw on hand-made results (beam 2, power 1, CTranslate2's scores score / |Y|): raw sums;
    None where a hypothesis was cut or reached the source's last step, or, with min_len 1, where the
    empty hypothesis (EOS first, which CTranslate2 searched without min_decoding_length) is returned:
    it counted toward CTranslate2's stop, not heed's."""
    model = heed.load(str(ct2_dir)).model
    eos = model.tgt_tokens[model.eos_id]
    cfg = DecodeConfig(beam_size=2, length_penalty=1.0, length_norm="power", stopping="beam")
    result = SimpleNamespace(hypotheses=[["a", eos], ["a", "b", "c", eos]], scores=[-0.5, -0.52], attention=None)
    assert model._beam_raw(result, cfg, 10, 10).scores == pytest.approx([-1.0, -2.08])
    assert model._beam_raw(result, cfg, 4, 4) is None  # registered at the call's last step (3), cut ones too
    assert model._beam_raw(result, cfg, 4, 9) is not None  # ended by step 3; the search ran on, not past it
    assert model._beam_raw(result, cfg, 3, 9) is None  # past the source's own limit
    cut = SimpleNamespace(hypotheses=[["a", eos], ["a", "b"]], scores=[-0.5, -0.4], attention=None)
    assert model._beam_raw(cut, cfg, 10, 10) is None
    empty = SimpleNamespace(hypotheses=[["a", eos], [eos]], scores=[-0.5, -0.9], attention=None)
    assert model._beam_raw(empty, cfg, 10, 10) is None
    assert model._beam_raw(empty, cfg.model_copy(update={"min_len": 0}), 10, 10).scores == pytest.approx([-1.0, -0.9])


def test_a_shifted_stop_beam_result_is_heeds_only_where_no_left_out_hypothesis_could_rank(ct2_dir):
    """_beam_shifted on a hand-made result of a search with min_decoding_length 1 (beam 2, power 1,
    CTranslate2's scores (raw + delta) / |Y|, delta 0.5): raw sums back, reranked by heed's score. A
    hypothesis CTranslate2 left out scored at most the lowest returned, -0.3, and ended by the
    longest returned (4 tokens with EOS: the step that stopped the search), so heed scores it at most
    -0.3 - 0.5 / 4 = -0.425: heed's best (-0.4) is settled (not by the source's own limit, 10 tokens:
    -0.35), its second (-0.55) is not."""
    model = heed.load(str(ct2_dir)).model
    eos = model.tgt_tokens[model.eos_id]
    cfg = DecodeConfig(beam_size=2, length_penalty=1.0, length_norm="power", stopping="beam")
    result = SimpleNamespace(hypotheses=[["a", eos], ["a", "b", "c", eos]], scores=[-0.3, -0.275], attention=None)
    settled = model._beam_shifted(result, 0.5, cfg, 10, 10)
    assert settled.scores == pytest.approx([-1.1, -1.6])  # heed ranks ["a", "b", "c"] first: -0.4 against -0.55
    assert model._beam_shifted(result, 0.5, cfg.model_copy(update={"n_best": 2}), 10, 10) is None
    assert model._beam_shifted(result, math.inf, cfg, 10, 10) is None  # p(EOS first) 1: no shift to take off
    assert model._beam_shifted(result, 0.5, cfg, 4, 4) is None  # registered at the call's last step


@pytest.mark.parametrize("options", [
    dict(length_penalty=10.0, length_norm="power", min_len=1), dict(length_penalty=10.0, length_norm="power", n_best=3),
    dict(length_penalty=1.0, length_norm="power", max_len_a=0.5, max_len_b=1),
    dict(length_penalty=0.0, min_len=0, n_best=2), dict(length_penalty=10.0, length_norm="power", min_len=3),
    dict(length_penalty=0.6, n_best=2), dict(length_penalty=2.0, max_len_a=0.5, max_len_b=1)],
    ids=["power10", "power10-nbest3", "power1-cut", "none-min0-nbest2", "power10-min3", "gnmt", "gnmt2-cut"])
def test_with_stop_beam_a_ct2_export_gives_heeds_stop_beam_search(transformer_run, ct2_dir, tiny_corpus, options,
                                                                  monkeypatch):
    """stopping "beam" (a sentence ends once `beam` hypotheses finished) is CTranslate2's own stop: its
    search (ranking "ctranslate2": no penalty or the power one, min_len <= 1; else searched to the
    limit, where heed keeps what the beam stop finished) gives heed's stop-beam n-best lists, scores
    and log-probabilities. At alpha 10 the beam stop's best differs from heed's exact stop's for some
    sources. Where the limit cuts
    outputs (max_len 0.5 * src_len + 1), CTranslate2 returns what it cut at its last step, where heed
    forces EOS a step later: those sources are searched again to their limit."""
    exported, pytorch = heed.load(str(ct2_dir)), heed.load(str(transformer_run), device="cpu")
    calls = []  # each translate_batch call's ranks
    search_here = exported.model._translate_batch
    monkeypatch.setattr(exported.model, "_translate_batch", lambda *a, **k: calls.append(k["ranks"]) or search_here(*a, **k))
    sources = _sources(tiny_corpus)
    decode = dict(beam=4, stopping="beam", **options)
    path = ranking(exported.resolve_decode({k: v for k, v in decode.items() if k != "beam"}, beam=4))
    fast = options.get("length_norm") == "power" or options["length_penalty"] == 0
    assert path == ("ctranslate2" if fast and options.get("min_len", 1) <= 1 else "heed")
    mine, theirs = pytorch.translate_nbest(sources, **decode), exported.translate_nbest(sources, **decode)
    assert [[t.tokens for t in n] for n in theirs] == [[t.tokens for t in n] for n in mine]
    for s, t in zip((t for n in mine for t in n), (t for n in theirs for t in n)):
        assert abs(s.score - t.score) < 1e-4 and abs(s.log_prob - t.log_prob) < 1e-4
    if options["length_penalty"] == 10.0:
        exact = pytorch.translate_nbest(sources, **(decode | {"stopping": "exact"}))
        assert sum(e[0].tokens != m[0].tokens for e, m in zip(exact, mine)) >= 2
    if path == "ctranslate2":  # the sources the fast path searched again, to their limit
        assert ("heed" in calls) == ("max_len_a" in options)


def test_beam_stops_reach_as_far_as_most_of_a_models_searches_stopped():
    stops = BeamStops()
    assert stops.reach(30, least=2) == 30  # nothing known yet: to the limit
    stops.add(10, 20)  # stopped at half its limit
    assert stops.reach(30, least=2) == 15 and stops.reach(30, least=20) == 20
    for _ in range(18):
        stops.add(5, 20)  # a quarter, mostly; the 0.9 quantile of 19 shares is the 18th: still a quarter
    assert stops.reach(30, least=2) == 8
    for _ in range(3):
        stops.add(20, 20)  # 3 of 22 at their limit: the 0.9 quantile (the 20th) is one of them
    assert stops.reach(30, least=2) == 30


@pytest.mark.parametrize("seeded", [False, True], ids=["learned", "too-short"])
@pytest.mark.parametrize("options", [dict(length_penalty=0.6), dict(length_penalty=1.0, length_norm="power", min_len=3)],
                         ids=["gnmt", "power-min3"])
def test_with_stop_beam_where_heed_ranks_a_search_first_reaches_as_far_as_earlier_ones_stopped(
        transformer_run, ct2_dir, tiny_corpus, options, seeded):
    """Where heed ranks a stopping "beam" search (the GNMT penalty, min_len > 1), CTranslate2 searches
    with no early stop; after a first batch (to the limit) it searches first only as far as the
    earlier ones stopped (BeamStops.reach), and the sources not stopped by then again to the limit.
    The n-best lists, scores and log-probabilities are heed's either way: learned from the first
    batch, and with the stops seeded far too short, where most sources are searched twice."""
    exported, pytorch = heed.load(str(ct2_dir)), heed.load(str(transformer_run), device="cpu")
    model, sources = exported.model, _sources(tiny_corpus)[:-1]
    decode = dict(beam=4, stopping="beam", n_best=2, **options)
    assert ranking(exported.resolve_decode({k: v for k, v in decode.items() if k != "beam"}, beam=4)) == "heed"
    mine = pytorch.translate_nbest(sources, **decode)
    if seeded:
        for _ in range(8):
            model.beam_stops.add(1, 10)
    else:
        exported.translate_nbest(sources, **decode)  # the first batch: to the limit, its stops counted
    reaches, wholes = [], []  # (reach, limit) of each batch; how many sources each search again to the limit had
    reach_here, search_here = model.beam_stops.reach, model._translate_batch

    def reach(limit: int, least: int) -> int:
        reaches.append((reach_here(limit, least), limit))
        return reaches[-1][0]

    def search(*a: Any, **k: Any) -> Any:
        if k.get("whole"):
            wholes.append(len(a[1]))
        return search_here(*a, **k)

    model.beam_stops.reach, model._translate_batch = reach, search
    theirs = exported.translate_nbest(sources, **decode)
    assert [[t.tokens for t in n] for n in theirs] == [[t.tokens for t in n] for n in mine]
    for s, t in zip((t for n in mine for t in n), (t for n in theirs for t in n)):
        assert abs(s.score - t.score) < 1e-4 and abs(s.log_prob - t.log_prob) < 1e-4
        torch.testing.assert_close(torch.from_numpy(t.attention), torch.from_numpy(s.attention), atol=1e-4, rtol=0)
    assert any(first < limit for first, limit in reaches)  # a first search shorter than the limit
    if seeded:
        assert sum(wholes) >= len(sources) // 2  # most searched again to the limit


def _first_step_ended(model: Any, sources: list[str], codec: Any, beam: int) -> list[bool]:
    """Per source, whether its EOS ranks among its first step's best `beam` candidates, from
    CTranslate2's teacher-forced EOS and its best other tokens (which it normalises without EOS)."""
    translator = model._translator()
    source = [[model.src_tokens[i] for i in codec.encode_src(x)] + [model.src_tokens[model.eos_id]] for x in sources]
    ends = [s.log_probs[-1] for s in translator.score_batch(source, [[] for _ in source])]
    others = translator.translate_batch(source, beam_size=1, return_alternatives=True, num_hypotheses=beam,
                                        max_decoding_length=1, return_scores=True, max_input_length=0)
    return [end > o.scores[beam - 1] + math.log1p(-math.exp(end)) for o, end in zip(others, ends)]


@pytest.mark.parametrize("probe", [False, True], ids=["searched-again", "probed"])
@pytest.mark.parametrize("options", [dict(length_penalty=1.0, length_norm="power"), dict(length_penalty=0.0)],
                         ids=["power1", "none"])
def test_with_stop_beam_a_source_whose_empty_hypothesis_finished_first_is_still_heeds(transformer_run, tiny_corpus,
                                                                                      tmp_path, options, probe):
    """CTranslate2 searches stopping "beam" without min_decoding_length (which would renormalise the
    first step): with min_len 1 its live beams are heed's, but an EOS among the first step's best
    `beam` finishes the empty hypothesis, which counts toward its stop. With </s> favoured by 2 in
    the output layer's bias that happens for most sources.
    - Without a probe: where the empty hypothesis is returned the source is searched again with
      min_decoding_length 1, its first step's shift taken off (or, where that shift could reorder its
      n-best, to its limit where heed ranks); where `beam` others outrank it CTranslate2's result
      stands. Both kinds occur here with the power penalty (without one the empty hypothesis is
      always returned).
    - Probed (FirstStepEnds: the default for a model's first search, and kept while such sources are
      common): one step finds those sources first, and they alone are searched with
      min_decoding_length 1, once.
    Either way every n-best list, score and log-probability is heed's."""
    base = load_model_dir(transformer_run)
    with torch.no_grad():
        base.model.decoder.generator.bias[base.model.eos_id] += 2.0
    model_dir = save_model_dir(tmp_path / "model", model=base.model, config=base.config, codec=base.codec)
    exported = heed.load(str(export_model(model_dir, tmp_path / "ct2", kind="ctranslate2")))
    pytorch = heed.load(str(model_dir), device="cpu")
    model, sources = exported.model, _sources(tiny_corpus)[:-1]  # each searched by CTranslate2
    if not probe:
        model.first_step_ends = FirstStepEnds(ended=0, seen=10**6)
    returned = []  # per source CTranslate2 searched without min_decoding_length: whether it returned the empty hypothesis
    shifted = []  # per source searched with min_decoding_length 1: its shift
    raw, shift = model._beam_raw, model._beam_shifted

    def spied(r: Any, *a: Any, **k: Any) -> Any:
        if not k:  # the first look at each source's result (empty_ok: the second, for the empty hypothesis)
            returned.append([model.tgt_tokens[model.eos_id]] in r.hypotheses)
        return raw(r, *a, **k)

    model._beam_raw = spied
    model._beam_shifted = lambda r, delta, *a: shifted.append(delta) or shift(r, delta, *a)
    decode = dict(beam=4, stopping="beam", n_best=2, **options)
    assert ranking(exported.resolve_decode({k: v for k, v in decode.items() if k != "beam"}, beam=4)) == "ctranslate2"
    mine, theirs = pytorch.translate_nbest(sources, **decode), exported.translate_nbest(sources, **decode)
    assert [[t.tokens for t in n] for n in theirs] == [[t.tokens for t in n] for n in mine]
    for s, t in zip((t for n in mine for t in n), (t for n in theirs for t in n)):
        assert abs(s.score - t.score) < 1e-4 and abs(s.log_prob - t.log_prob) < 1e-4
    finished_first = sum(_first_step_ended(model, sources, pytorch.codec, 4))
    assert finished_first > 0.5 * len(sources)
    if probe:  # found first, searched once; the others as before, and none of them returned the empty hypothesis
        assert len(shifted) == finished_first and len(returned) == len(sources) - finished_first
        assert not any(returned) and all(0 < d < math.inf for d in shifted)
        assert (model.first_step_ends.ended, model.first_step_ends.seen) == (1 + finished_first, 2 + len(sources))
        assert model.first_step_ends.probing
    else:
        assert len(returned) == len(sources) and finished_first >= sum(returned) > 0
        assert len(shifted) == sum(returned)  # those searched again with min_decoding_length 1
        if options["length_penalty"]:  # without one, a short sum outranks the longer ones: every empty one returned
            assert finished_first > sum(returned)


def test_a_ct2_export_probes_the_first_step_only_while_eos_often_ranks_there(transformer_run, tiny_corpus, tmp_path):
    """FirstStepEnds: a model's first stopping "beam" search probes the first step (a prior of one in
    two); with </s> held back by 5 in the output layer's bias no source puts EOS among its first
    step's best 4, so after one batch the count turns the probe off, and later searches count the
    sources searched again instead."""
    base = load_model_dir(transformer_run)
    with torch.no_grad():
        base.model.decoder.generator.bias[base.model.eos_id] -= 5.0
    model_dir = save_model_dir(tmp_path / "model", model=base.model, config=base.config, codec=base.codec)
    exported = heed.load(str(export_model(model_dir, tmp_path / "ct2", kind="ctranslate2")))
    model, sources = exported.model, _sources(tiny_corpus)[:-1]  # each searched by CTranslate2
    assert not any(_first_step_ended(model, sources, base.codec, 4))
    probes = []
    probe = model._probe_first_step
    model._probe_first_step = lambda *a: probes.append(len(a[1])) or probe(*a)
    for _ in range(2):
        exported.translate(sources, beam=4, stopping="beam")
    assert probes == [len(sources)]  # the first batch only
    assert (model.first_step_ends.ended, model.first_step_ends.seen) == (1, 2 + 2 * len(sources))
    assert not model.first_step_ends.probing and PROBE_RATE * model.first_step_ends.seen > 1
    assert FirstStepEnds(ended=1 + 7, seen=2 + 64).probing and not FirstStepEnds(ended=1 + 3, seen=2 + 64).probing


def test_an_int8_ct2_export_is_smaller_and_translates_nearly_alike(transformer_run, ct2_dir, tiny_corpus, tmp_path):
    int8 = export_model(transformer_run, tmp_path / "int8", kind="ctranslate2", int8=True)
    assert json.loads((int8 / MANIFEST_FILE).read_text())["int8"] is True
    assert (int8 / "model.bin").stat().st_size < (ct2_dir / "model.bin").stat().st_size  # the tables stay float
    sources = _sources(tiny_corpus)
    quantized = heed.load(str(int8))
    # int8 products where they are exact; on an x86 CPU without VNNI, where u8s8 saturates, int16, or
    # float32 where CTranslate2 has no int16 products (it has them with Intel's MKL only: not on an AMD EPYC)
    import ctranslate2

    wider = "int16" if "int16" in ctranslate2.get_supported_compute_types("cpu") else "float32"
    products = "int8" if cpu_int8_products_exact() else wider
    assert quantized.model.int8 and quantized.model._translator().compute_type.startswith(products)
    assert heed.load(str(ct2_dir)).model._translator().compute_type == "float32"
    a, b = heed.load(str(ct2_dir)).translate(sources), quantized.translate(sources)
    assert sum(x.text == y.text for x, y in zip(a, b)) >= 0.75 * len(sources)


@pytest.mark.parametrize("exact", [True, False])
def test_an_int8_export_multiplies_in_int16_where_int8_products_saturate(ct2_dir, transformer_run, tmp_path,
                                                                         monkeypatch, exact):
    import ctranslate2

    from heed.export import ct2_run

    int8 = export_model(transformer_run, tmp_path / "int8", kind="ctranslate2", int8=True)
    monkeypatch.setattr(ct2_run, "cpu_int8_products_exact", lambda: exact)
    wider = "int16" if "int16" in ctranslate2.get_supported_compute_types("cpu") else "float32"
    model = heed.load(str(int8)).model
    assert model.compute_type == ("default" if exact else wider)
    assert model._translator().compute_type.startswith("int8" if exact else wider)
    assert heed.load(str(ct2_dir)).model.compute_type == "default"  # a float32 export is never changed


def test_cli_export_ctranslate2_translates_and_evaluates_as_the_model_dir(transformer_run, tiny_corpus, tmp_path,
                                                                          heed_cli):
    result = heed_cli("export", transformer_run, "-o", tmp_path / "ct2", "--format", "ctranslate2")
    assert result.exit_code == 0 and "(ctranslate2)" in result.stdout, result.output
    for beam in ("1", "3"):
        args = ("--input", tiny_corpus["test_src"], "--beam", beam)
        from_torch = heed_cli("translate", transformer_run, *args, "--device", "cpu")
        from_ct2 = heed_cli("translate", tmp_path / "ct2", *args)
        assert from_ct2.exit_code == 0, from_ct2.output
        assert from_ct2.stdout == from_torch.stdout and from_ct2.stdout.count("\n") == 20
    scores = [heed_cli("evaluate", d, "--src", tiny_corpus["test_src"], "--ref", tiny_corpus["test_ref"],
                       "--device", "cpu").stdout for d in (transformer_run, tmp_path / "ct2")]
    assert scores[0] == scores[1] and "BLEU" in scores[0]


def test_what_ctranslate2_cannot_do_is_refused_in_one_line(trained_run, transformer_run, ct2_dir, tmp_path, heed_cli,
                                                           assert_user_error):
    assert_user_error(heed_cli("export", trained_run, "-o", tmp_path / "rnn", "--format", "ctranslate2"),
                      "model.family", "CTranslate2 runs Transformers", "--format onnx")
    assert not (tmp_path / "rnn").exists()
    assert_user_error(heed_cli("export", transformer_run, "-o", tmp_path / "x", "--format", "tflite"),
                      "unknown export format 'tflite'", "onnx, ctranslate2")
    assert_user_error(heed_cli("translate", ct2_dir, "--beam", "3", "--coverage-penalty", "0.2",
                               input="le 3 mars 1998\n"), "decode.coverage_penalty")
    assert_user_error(heed_cli("translate", ct2_dir, transformer_run, input="le 3 mars 1998\n"),
                      "CTranslate2's own search", "ONNX export")
    translator = heed.load(str(ct2_dir))
    for call in (lambda: translator.explore(["le 3 mars 1998"], beam=3),
                 lambda: translator.align(["le 3 mars 1998"], ["1998-03-03"])):
        with pytest.raises(HeedError, match="CTranslate2's own search.*model directory or an ONNX export"):
            call()
    with pytest.raises(HeedError, match="runs on the CPU"):
        heed.load(str(ct2_dir), bf16=True)


def test_without_ctranslate2_the_message_says_how_to_install_it(transformer_run, ct2_dir, tmp_path, heed_cli,
                                                                 assert_user_error, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` raises ImportError
    hints = ("pip install 'heed-nmt[ct2]'", "pip install -e '.[ct2]'")
    assert_user_error(heed_cli("translate", ct2_dir, input="le 3 mars 1998\n"), "ctranslate2", *hints)
    assert_user_error(heed_cli("export", transformer_run, "-o", tmp_path / "q", "--format", "ctranslate2"), *hints)


def test_a_changed_ct2_model_file_is_refused_by_sha256(transformer_run, tmp_path, heed_cli, assert_user_error):
    out = export_model(transformer_run, tmp_path / "ct2", kind="ctranslate2")
    with open(out / "model.bin", "r+b") as f:
        f.seek(-4, 2)
        f.write(b"\0\1\2\3")
    assert_user_error(heed_cli("translate", out, input="le 3 mars 1998\n"), "model.bin", "sha256")
    out = export_model(transformer_run, tmp_path / "ct2", kind="ctranslate2")
    (out / "target_vocabulary.json").unlink()
    with pytest.raises(HeedError, match="target_vocabulary.json: missing"):
        heed.load(str(out))


def test_heed_serve_translates_with_a_ct2_export_and_refuses_its_explorer_clearly(transformer_run, ct2_dir):
    with served_beside_pytorch(ct2_dir, transformer_run) as client:  # same parameters, same n-best texts
        explored = client.post("/v1/translate", json={"sentences": ["le 3 mars 1998"], "model": "export",
                                                      "trace": True})
    assert explored.status_code in (400, 422) and "CTranslate2's own search" in explored.text


def test_the_coverage_penalty_is_a_config_error_naming_the_field(ct2_dir):
    with pytest.raises(ConfigError, match="decode.coverage_penalty"):
        heed.load(str(ct2_dir)).translate(["le 3 mars 1998"], beam=2, coverage_penalty=0.3)
