"""Forced prefixes, sampling and beam search trees: truths a person can check.

The models are those of test_search.py (search_fakes.py): tiny random seeded Seq2Seq models, whose
outputs are scored exactly by the teacher-forced pass, and a scripted fake whose next-token
probabilities are a table, so distributions and beams can be worked out by hand.
"""
from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from pydantic import ValidationError
from search_fakes import (
    DECODERS,
    EOS,
    HAND_TABLE,
    PAD,
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
    table,
    teacher_forced,
    tiny_model,
)

from heed.search import (
    BeamTree,
    DecodeConfig,
    Decoded,
    Hypothesis,
    Prefix,
    beam_search,
    greedy_search,
    sample,
    search,
    translate_ids,
)
from heed.search.scoring import FORCED_FLOOR

# Sources of 6, 3, 5 and 1 tokens (max_len_a 1, max_len_b 2: at most 8, 5, 7 and 3 output tokens),
# and one forced prefix each, of different lengths, one of them empty.
LENGTHS = [6, 3, 5, 1]
PREFIXES = [[A, B, C], [], [D], [B, B]]
SHORT = {"max_len_a": 1.0, "max_len_b": 2}
MODES = {
    "greedy": DecodeConfig(**SHORT),
    "beam": DecodeConfig(beam_size=3, n_best=3, **SHORT),
    "sampling": DecodeConfig(sampling=True, n_best=3, seed=5, **SHORT),
}


def path_to_root(tree: BeamTree, node: int) -> list[int]:
    """The tokens from the root down to `node`, the node's own token last."""
    tokens = []
    while tree.nodes[node].parent is not None:
        tokens.append(tree.nodes[node].token)
        node = tree.nodes[node].parent
    return tokens[::-1]


def assert_teacher_forced_log_probs(model, src: torch.Tensor, src_len: int, hyps: list[Hypothesis]) -> None:
    log_probs, _ = teacher_forced(model, src, src_len, [h.tokens for h in hyps])
    assert [h.log_prob for h in hyps] == pytest.approx(log_probs.tolist(), rel=1e-5, abs=1e-6)


# ---------------------------------------------------------------------------------------------
# Forced prefixes


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("mode", list(MODES))
def test_every_output_starts_with_its_prefix_and_scores_as_teacher_forced(decoder: str, mode: str) -> None:
    model = tiny_model(decoder)
    src, lengths = padded_batch(LENGTHS)
    cfg = MODES[mode]
    results = search(model, src, lengths, cfg, prefix=Prefix.of(PREFIXES, pad_id=PAD))
    for b, (hyps, prefix) in enumerate(zip(results, PREFIXES)):
        assert len(hyps) == cfg.n_best
        assert all(h.tokens[:len(prefix)] == prefix for h in hyps)
        # the prefix keeps its model log-probs: the score is the model's own score of the whole output
        assert_teacher_forced_log_probs(model, src[b:b + 1], int(lengths[b]), hyps)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_empty_prefixes_change_nothing(beam_size: int) -> None:
    model = tiny_model("bahdanau")
    src, lengths = padded_batch(LENGTHS)
    cfg = DecodeConfig(beam_size=beam_size, n_best=beam_size, **SHORT)
    empty = Prefix.of([[] for _ in LENGTHS], pad_id=PAD)
    for got, want in zip(search(model, src, lengths, cfg, prefix=empty), search(model, src, lengths, cfg)):
        assert_same_hypotheses(got, want)


def test_forcing_greedys_own_first_tokens_changes_nothing() -> None:
    model = tiny_model("luong")
    src, lengths = padded_batch(LENGTHS)
    cfg = DecodeConfig(**SHORT)
    free = greedy_search(model, src, lengths, cfg)
    assert all(len(h.tokens) >= 2 for h in free)  # so the prefixes below are not empty
    own = Prefix.of([h.tokens[:2] for h in free], pad_id=PAD)
    assert_same_hypotheses(greedy_search(model, src, lengths, cfg, prefix=own), free)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_prefix_longer_than_max_len_is_kept_whole_then_eos(beam_size: int) -> None:
    model = tiny_model("luong")
    src, lengths = padded_batch([3])
    long_prefix = [A, B, C, D, A]
    cfg = DecodeConfig(beam_size=beam_size, max_len_a=0.0, max_len_b=2)  # 2 tokens, shorter than the prefix
    (hyps,) = search(model, src, lengths, cfg, prefix=Prefix.of([long_prefix], pad_id=PAD))
    assert [h.tokens for h in hyps] == [long_prefix]
    assert_teacher_forced_log_probs(model, src, 3, hyps)


# The model much prefers A (.9), which ends at once; forced to start with B (.1), it goes on as
# the table says after B: C (.7), then EOS.
PREFERS_A = table({(): {A: 0.9, B: 0.1}, (B,): {C: 0.7, D: 0.3}})


def test_an_unlikely_forced_token_is_followed_by_the_models_continuation() -> None:
    src, lengths = one_source()
    cfg = DecodeConfig(max_len_a=0, max_len_b=10)
    forced_b = Prefix.of([[B]], pad_id=PAD)
    assert greedy_search(ScriptedModel(PREFERS_A), src, lengths, cfg)[0].tokens == [A]
    (greedy,) = greedy_search(ScriptedModel(PREFERS_A), src, lengths, cfg, prefix=forced_b)
    assert greedy.tokens == [B, C]
    assert greedy.log_prob == pytest.approx(math.log(0.1 * 0.7))


@pytest.mark.parametrize("cfg", [DecodeConfig(), DecodeConfig(sampling=True, seed=0)], ids=["greedy", "sampling"])
def test_a_forced_token_the_model_rules_out_is_still_emitted(cfg: DecodeConfig) -> None:
    src, lengths = one_source()
    (hyps,) = search(ScriptedModel(table({(): {A: 1.0}})), src, lengths, cfg, prefix=Prefix.of([[B]], pad_id=PAD))
    # It stays forced, at the floor's finite log-prob (so its score can still be written as JSON).
    assert hyps[0].tokens[:1] == [B] and hyps[0].log_prob <= FORCED_FLOOR


def test_beam_n_best_hypotheses_all_share_the_prefix() -> None:
    # Beam 3 after the forced B: "B C" .1 * .7 = .07 and "B D" .1 * .3 = .03, each then EOS (1).
    src, lengths = one_source()
    cfg = DecodeConfig(beam_size=3, n_best=2, max_len_a=0, max_len_b=10)
    hyps = beam_search(ScriptedModel(PREFERS_A), src, lengths, cfg, prefix=Prefix.of([[B]], pad_id=PAD))[0]
    assert [h.tokens for h in hyps] == [[B, C], [B, D]]
    assert [h.log_prob for h in hyps] == pytest.approx([math.log(0.07), math.log(0.03)])


@pytest.mark.parametrize("beam_size", [1, 2])
def test_a_prefix_overrides_ngram_blocking_and_min_len_applies_after_it(beam_size: int) -> None:
    # loves_eos: EOS .9, A .06, B .04 at every step. The prefix A A repeats the unigram A, which
    # no_repeat_ngram=1 forbids: the forced token wins. After it A is blocked and min_len 3 forbids
    # EOS, so B is the only token left; then EOS.
    src, lengths = one_source()
    cfg = DecodeConfig(beam_size=beam_size, no_repeat_ngram=1, min_len=3, max_len_a=0, max_len_b=10)
    (hyps,) = search(ScriptedModel(loves_eos), src, lengths, cfg, prefix=Prefix.of([[A, A]], pad_id=PAD))
    assert [h.tokens for h in hyps] == [[A, A, B]]
    assert hyps[0].log_prob == pytest.approx(math.log(0.06 * 0.06 * 0.04 * 0.9))
    # Without blocking, min_len still holds after a shorter prefix: B, then A A (EOS forbidden), then EOS.
    free = cfg.model_copy(update={"no_repeat_ngram": 0})
    (hyps,) = search(ScriptedModel(loves_eos), src, lengths, free, prefix=Prefix.of([[B]], pad_id=PAD))
    assert [h.tokens for h in hyps] == [[B, A, A]]


def test_translate_ids_forces_each_sources_prefix_in_input_order() -> None:
    model = tiny_model("luong")
    sources = [[3, 4], [5, 6, 7, 8, 9], [4], [6, 5, 4]]  # batched longest first: not input order
    prefixes = [[A], [], [C, D], [B, A, B]]
    cfg = DecodeConfig(beam_size=2, n_best=2, **SHORT)
    decoded = translate_ids(model, sources, cfg, device=torch.device("cpu"), batch_size=2, prefixes=prefixes)
    for ids, prefix, (hyps, tree) in zip(sources, prefixes, decoded):
        assert tree is None  # not traced
        assert all(h.tokens[:len(prefix)] == prefix for h in hyps)
        src = torch.tensor([ids + [EOS]])
        alone = beam_search(model, src, torch.tensor([len(ids) + 1]), cfg, prefix=Prefix.of([prefix], pad_id=PAD))[0]
        assert_same_hypotheses(hyps, alone)


# ---------------------------------------------------------------------------------------------
# Sampling


def sampling(**fields) -> DecodeConfig:
    return DecodeConfig(sampling=True, **{"n_best": 4, "seed": 11, **SHORT, **fields})


@pytest.mark.parametrize("decoder", DECODERS)
def test_the_same_seed_gives_the_same_samples(decoder: str) -> None:
    model = tiny_model(decoder)
    src, lengths = padded_batch(LENGTHS)
    first, again = (sample(model, src, lengths, sampling(temperature=1.5)) for _ in range(2))
    for got, want in zip(again, first):
        assert_same_hypotheses(got, want)
    other = sample(model, src, lengths, sampling(temperature=1.5, seed=12))
    assert [[h.tokens for h in hyps] for hyps in other] != [[h.tokens for h in hyps] for hyps in first]


@pytest.mark.parametrize("decoder", DECODERS)
def test_a_sentence_samples_the_same_alone_as_in_a_padded_batch(decoder: str) -> None:
    model = tiny_model(decoder)
    src, lengths = padded_batch(LENGTHS)
    cfg = sampling(temperature=1.5)
    batched = sample(model, src, lengths, cfg)
    for b, n in enumerate(LENGTHS):
        alone = sample(model, src[b:b + 1, :n], lengths[b:b + 1], cfg)[0]
        assert [h.tokens for h in batched[b]] == [h.tokens for h in alone]
        assert [h.score for h in batched[b]] == pytest.approx([h.score for h in alone], rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("sharp", [{"top_k": 1}, {"temperature": 1e-4}, {"temperature": 1e-300}, {"top_p": 1e-6}],
                         ids=["top_k=1", "temperature=1e-4", "temperature=1e-300", "top_p=1e-6"])
def test_sampling_with_all_mass_on_the_best_token_equals_greedy(decoder: str, sharp: dict) -> None:
    model = tiny_model(decoder)
    src, lengths = padded_batch(LENGTHS)
    greedy = greedy_search(model, src, lengths, DecodeConfig(**SHORT))
    for hyps, g in zip(sample(model, src, lengths, sampling(n_best=3, **sharp)), greedy):
        assert [h.tokens for h in hyps] == [g.tokens] * 3
        assert [h.log_prob for h in hyps] == pytest.approx([g.log_prob] * 3, rel=1e-5)


def test_a_huge_temperature_samples_every_allowed_token_with_finite_scores() -> None:
    """1e300 divides the shifted log-probs to about 0: uniform over the allowed tokens, no NaN."""
    model = tiny_model("luong")
    src, lengths = padded_batch(LENGTHS)
    for hyps in sample(model, src, lengths, sampling(n_best=4, temperature=1e300)):
        assert all(math.isfinite(h.log_prob) and h.tokens for h in hyps)


ONE_STEP = {A: 0.5, B: 0.3, C: 0.2}  # then EOS


def tempered(probs: dict[int, float], temperature: float) -> dict[int, float]:
    """p^(1/T), normalised."""
    weights = {t: p ** (1 / temperature) for t, p in probs.items()}
    return {t: w / sum(weights.values()) for t, w in weights.items()}


@pytest.mark.parametrize("fields,want", [
    ({}, ONE_STEP),
    ({"top_k": 2}, {A: 0.5 / 0.8, B: 0.3 / 0.8}),  # C cut; A:B stays 5:3
    # nucleus: the fewest tokens, most likely first, whose probability reaches p
    ({"top_p": 0.45}, {A: 1.0}),  # A alone (.5) reaches .45
    ({"top_p": 0.6}, {A: 0.5 / 0.8, B: 0.3 / 0.8}),  # A (.5) does not reach .6; A + B (.8) does
    ({"top_p": 0.85}, ONE_STEP),  # A + B (.8) does not reach .85: C is in too
    ({"temperature": 2.0}, tempered(ONE_STEP, 2.0)),  # flatter: .415, .322, .263
    ({"temperature": 0.5}, tempered(ONE_STEP, 0.5)),  # sharper: .658, .237, .105
], ids=["plain", "top_k=2", "top_p=.45", "top_p=.6", "top_p=.85", "temperature=2", "temperature=.5"])
def test_sample_frequencies_match_the_distribution(fields: dict, want: dict[int, float]) -> None:
    n = 4000
    src, lengths = one_source()
    (hyps,) = sample(ScriptedModel(table({(): ONE_STEP})), src, lengths, sampling(n_best=n, **fields))
    drawn = Counter(h.tokens[0] for h in hyps)
    assert set(drawn) == {t for t, p in want.items() if p > 0}  # tokens cut off are never drawn
    for token, p in want.items():
        # 4 standard errors of a frequency over n draws: a correct sampler fails this about 1 time
        # in 16,000 per token and seed (the seed is fixed, so the test itself is deterministic).
        assert drawn[token] / n == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / n) + 1e-9)
    # the score is the model's own log-prob, whatever the temperature or the cut-offs
    for h in hyps:
        assert h.tokens == [h.tokens[0]] and h.log_prob == pytest.approx(math.log(ONE_STEP[h.tokens[0]]))


@pytest.mark.parametrize("decoder", DECODERS)
def test_sample_scores_are_untempered_teacher_forced_log_probs_best_first(decoder: str) -> None:
    model = tiny_model(decoder)
    src, lengths = padded_batch(LENGTHS)
    for b, hyps in enumerate(sample(model, src, lengths, sampling(n_best=6, temperature=2.0, top_k=4))):
        assert_teacher_forced_log_probs(model, src[b:b + 1], LENGTHS[b], hyps)
        assert [h.score for h in hyps] == [h.log_prob for h in hyps]  # no penalties
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) > 1  # temperature 2: they are not all the same


def test_search_samples_when_asked() -> None:
    model = tiny_model("luong")
    src, lengths = padded_batch(LENGTHS)
    cfg = sampling()
    for got, want in zip(search(model, src, lengths, cfg), sample(model, src, lengths, cfg)):
        assert_same_hypotheses(got, want)


def test_sample_needs_a_seed() -> None:
    src, lengths = padded_batch([3])
    with pytest.raises(ValueError, match="seed"):
        sample(tiny_model(), src, lengths, DecodeConfig(sampling=True))


@pytest.mark.parametrize("fields,match", [
    ({"beam_size": 2}, "beam_size"),
    ({"temperature": 0.0}, "temperature"),
    ({"temperature": -1.0}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_k": -1}, "top_k"),
    ({"seed": -1}, "seed"),
])
def test_decode_config_rejects_impossible_sampling_settings(fields: dict, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        DecodeConfig(sampling=True, **fields)


def test_sampling_may_return_more_samples_than_the_beam_size() -> None:
    assert DecodeConfig(sampling=True, n_best=5).n_best == 5


# ---------------------------------------------------------------------------------------------
# Beam search trees


def test_beam_tree_on_the_hand_table_is_the_hand_worked_one() -> None:
    # Beam 2 on HAND_TABLE (worked out in test_search.py): every step's 2 * beam best candidates,
    # by their tokens from the root, with their probability and what became of them.
    # step 0: A .6, B .4 (only two finite: both live)
    # step 1: B EOS .36 (EOS within the top 2: finished), A B .30, A EOS .18 (EOS ranked 3rd:
    #         pruned), A A .12 (the second best non-EOS: kept)
    # step 2: A B EOS .15 finished, A B A .09 kept, A A EOS .072 pruned, A B B .06 kept; then done
    want = {
        (A,): (0.6, "kept"), (B,): (0.4, "kept"),
        (B, EOS): (0.36, "finished"), (A, B): (0.30, "kept"), (A, EOS): (0.18, "pruned"), (A, A): (0.12, "kept"),
        (A, B, EOS): (0.15, "finished"), (A, B, A): (0.09, "kept"), (A, A, EOS): (0.072, "pruned"),
        (A, B, B): (0.06, "kept"),
    }
    src, lengths = one_source()
    trees: list[BeamTree] = []
    hyps = beam_search(ScriptedModel(HAND_TABLE), src, lengths,
                       DecodeConfig(beam_size=2, n_best=2, max_len_a=0, max_len_b=10), trees=trees)[0]
    (tree,) = trees
    root, *nodes = tree.nodes
    assert (root.parent, root.step, root.status) == (None, -1, "root")
    got = {tuple(path_to_root(tree, n.id)): (math.exp(n.log_prob), n.status) for n in nodes}
    assert got.keys() == want.keys()
    for path, (p, status) in want.items():
        assert got[path] == (pytest.approx(p), status)
    assert all(n.step == len(path_to_root(tree, n.id)) - 1 for n in nodes)
    assert [path_to_root(tree, h.node) for h in hyps] == [[B, EOS], [A, B, EOS]]
    assert [tree.nodes[h.node].score for h in hyps] == pytest.approx([math.log(0.36), math.log(0.15)])


def assert_well_formed(tree: BeamTree, hyps: list[Hypothesis], beam: int) -> None:
    """The truths of any beam tree: one root; each node one step below its parent, which was live;
    at most `beam` live nodes a step; EOS nodes are never live; each hypothesis' node spells its
    tokens and EOS from the root and carries its log_prob and score."""
    root = tree.nodes[0]
    assert (root.id, root.parent, root.step, root.token, root.status) == (0, None, -1, None, "root")
    assert [n.id for n in tree.nodes] == list(range(len(tree.nodes)))
    for node in tree.nodes[1:]:
        parent = tree.nodes[node.parent]
        assert parent.step == node.step - 1
        assert parent.status in ("root", "kept")
        assert node.status in ("kept", "finished", "pruned")
        if node.status != "pruned":
            assert (node.token == EOS) == (node.status == "finished")  # EOS finishes; it never lives on
        assert math.isfinite(node.log_prob) and math.isfinite(node.score)
        assert node.log_prob <= parent.log_prob + 1e-6  # log-probs only fall along a path
    kept = Counter(n.step for n in tree.nodes if n.status == "kept")
    assert max(kept.values(), default=0) <= beam
    for h in hyps:
        node = tree.nodes[h.node]
        assert node.status == "finished"
        assert path_to_root(tree, h.node) == h.tokens + [EOS]
        assert node.log_prob == pytest.approx(h.log_prob, rel=1e-6, abs=1e-6)
        assert node.score == pytest.approx(h.score, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("fields", [
    {"beam_size": 3, "n_best": 2},
    {"beam_size": 4, "n_best": 4, "length_penalty": 0.8, "min_len": 0},
], ids=["default", "n_best=beam+length_penalty"])
def test_beam_trees_are_well_formed_and_change_nothing(decoder: str, fields: dict) -> None:
    model = tiny_model(decoder)
    src, lengths = padded_batch(LENGTHS)
    cfg = DecodeConfig(**SHORT, **fields)
    trees: list[BeamTree] = []
    traced = beam_search(model, src, lengths, cfg, trees=trees)
    assert len(trees) == len(LENGTHS)
    for tree, hyps, plain in zip(trees, traced, beam_search(model, src, lengths, cfg)):
        assert_same_hypotheses(hyps, plain)
        assert all(h.node is None for h in plain)  # only a traced search names nodes
        assert_well_formed(tree, hyps, cfg.beam_size)


# A tiny vocabulary (real tokens A, B only) with n-gram blocking leaves fewer finite candidates
# than the beam and fewer finished hypotheses than n_best: the empty n-best slots name no node,
# and an EOS ranked below the beam (put in a spare slot as a dead beam) is pruned, never kept.
@pytest.mark.parametrize("fields", [
    pytest.param({"beam_size": 5, "n_best": 5, "no_repeat_ngram": 2, "min_len": 2}, id="n_best-not-reached"),
    pytest.param({"beam_size": 3, "n_best": 3, "no_repeat_ngram": 1, "min_len": 0}, id="eos-below-the-beam"),
])
def test_beam_trees_are_well_formed_when_constraints_starve_the_beam(fields: dict) -> None:
    model = tiny_model("plain", tgt_vocab=5)
    src, lengths = padded_batch([5, 2, 4, 1], seed=0)
    cfg = DecodeConfig(max_len_a=0.5, max_len_b=2, **fields)
    trees: list[BeamTree] = []
    traced = beam_search(model, src, lengths, cfg, trees=trees)
    for tree, hyps in zip(trees, traced):
        assert_well_formed(tree, hyps, cfg.beam_size)


def test_beam_tree_has_one_live_node_a_step_inside_the_prefix() -> None:
    model = tiny_model("luong")
    src, lengths = padded_batch(LENGTHS)
    cfg = DecodeConfig(beam_size=3, n_best=3, **SHORT)
    trees: list[BeamTree] = []
    results = beam_search(model, src, lengths, cfg, prefix=Prefix.of(PREFIXES, pad_id=PAD), trees=trees)
    for tree, hyps, prefix in zip(trees, results, PREFIXES):
        assert_well_formed(tree, hyps, cfg.beam_size)
        for t, token in enumerate(prefix):
            (node,) = [n for n in tree.nodes if n.step == t]
            assert (node.token, node.status) == (token, "kept")


@pytest.mark.parametrize("cfg", [DecodeConfig(), sampling()], ids=["greedy", "sampling"])
def test_search_gives_no_tree_for_greedy_search_or_sampling(cfg: DecodeConfig) -> None:
    src, lengths = padded_batch(LENGTHS)
    trees: list = []
    search(tiny_model(), src, lengths, cfg, trees=trees)
    assert trees == [None] * len(LENGTHS)


def test_search_gives_one_tree_a_sentence_for_beam_search() -> None:
    model = tiny_model()
    src, lengths = padded_batch(LENGTHS)
    cfg = DecodeConfig(beam_size=2, n_best=2, **SHORT)
    trees: list = []
    results = search(model, src, lengths, cfg, trees=trees)
    assert len(trees) == len(LENGTHS) and all(isinstance(t, BeamTree) for t in trees)
    for tree, hyps in zip(trees, results):
        assert_well_formed(tree, hyps, 2)


def test_translate_ids_traces_each_source_in_input_order() -> None:
    model = tiny_model("bahdanau")
    sources = [[3, 4], [5, 6, 7, 8, 9], [4], [6, 5, 4]]  # batched longest first: not input order
    cfg = DecodeConfig(beam_size=3, n_best=2, **SHORT)
    cpu = torch.device("cpu")
    decoded = translate_ids(model, sources, cfg, device=cpu, batch_size=2, trace=True)
    assert all(isinstance(d, Decoded) for d in decoded)
    for ids, (hyps, tree) in zip(sources, decoded):
        alone_trees: list[BeamTree] = []
        src = torch.tensor([ids + [EOS]])
        alone = beam_search(model, src, torch.tensor([len(ids) + 1]), cfg, trees=alone_trees)[0]
        assert_same_hypotheses(hyps, alone)
        assert [(n.parent, n.step, n.token, n.status) for n in tree.nodes] == \
               [(n.parent, n.step, n.token, n.status) for n in alone_trees[0].nodes]
        assert [n.log_prob for n in tree.nodes] == pytest.approx([n.log_prob for n in alone_trees[0].nodes],
                                                                 rel=1e-5, abs=1e-6)
        assert [h.node for h in hyps] == [h.node for h in alone]
    # untraced, and greedy: no trees
    assert all(d.tree is None for d in translate_ids(model, sources, cfg, device=cpu, batch_size=2))
    assert all(d.tree is None for d in translate_ids(model, sources, DecodeConfig(**SHORT), device=cpu, trace=True))


def test_greedy_ends_where_the_constraints_allow_no_token() -> None:
    # loves_eos on a 2-token vocabulary: after "A B", unigram blocking bans A and B and min_len 4 bans
    # EOS, so nothing is allowed. The output ends there (never PAD), with score -inf.
    src, lengths = one_source()
    cfg = DecodeConfig(no_repeat_ngram=1, min_len=4, max_len_a=0, max_len_b=6)
    (hyp,) = greedy_search(ScriptedModel(loves_eos), src, lengths, cfg)
    assert PAD not in hyp.tokens and hyp.tokens == [A, B]
    assert hyp.score == -math.inf


def test_models_and_fakes_implement_the_search_protocol() -> None:
    # runtime_checkable checks that the members exist; mypy checks their types (SearchModel's doc).
    from heed.search import SearchModel

    assert isinstance(tiny_model("luong"), SearchModel)
    assert isinstance(ScriptedModel(loves_eos), SearchModel)
    assert not isinstance(object(), SearchModel)


@pytest.mark.parametrize("beam", [1, 3])
def test_forbid_unk_takes_the_next_most_likely_token(beam: int) -> None:
    """<unk> is the model's favourite at every step; with forbid_unk the search writes its runner-up."""
    from heed.data.vocab import UNK

    assert UNK == A  # the fakes' first ordinary token has <unk>'s id
    unk_first = table({(): {UNK: 0.75, B: 0.2, EOS: 0.05}, (B,): {UNK: 0.6, EOS: 0.4}, (UNK,): {EOS: 1.0}})
    src, lengths = one_source()
    allowed = search(ScriptedModel(unk_first), src, lengths, DecodeConfig(beam_size=beam, min_len=0))[0]
    assert allowed[0].tokens == [UNK]
    forbidden = search(ScriptedModel(unk_first), src, lengths,
                       DecodeConfig(beam_size=beam, min_len=0, forbid_unk=True))[0]
    assert forbidden[0].tokens == [B]
    assert forbidden[0].log_prob == pytest.approx(math.log(0.2) + math.log(0.4))  # the model's own, unrenormalised
