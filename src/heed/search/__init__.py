"""Greedy search, beam search and sampling over the decoder protocol.

Search sees only `SearchModel` (heed.nn.protocol, a typing.Protocol), never a model class: `encode` once,
`init_state`, then `step` by step, reordering rows with `select`. heed.nn.rnn.seq2seq.Seq2Seq and
heed.nn.transformer.TransformerSeq2Seq implement
it, and so do the tests' scripted fakes and any other runtime (e.g. an exported graph).

Conventions, the same in greedy and beam search:
- Lengths. `max_len = min(floor(max_len_a * src_len + max_len_b), MAX_OUTPUT_TOKENS)` counts the output tokens *without*
  EOS: a hypothesis has at most `max_len` tokens, then EOS is forced, so the decoder runs at most
  `max_len + 1` steps. `min_len` also counts tokens without EOS: EOS is forbidden while fewer than
  `min_len` tokens are out. Where the two clash, `max_len` wins.
- Scores. `log_prob` is the model's own sum of log p(y_t | y_<t, x) over the tokens and EOS (a forced
  EOS keeps the model's log-probability), so it equals the teacher-forced score of the same tokens.
  PAD and BOS are never emitted: their log-probabilities are set to -inf, without renormalising.
  `score = log_prob / lp(|Y|) + cp(X; Y)` (Wu et al. 2016, eq. 14) with |Y| = tokens + EOS.
- Beam search ranks *live* hypotheses by log_prob alone (as fairseq does); the length and coverage
  penalties rank *finished* ones. So `beam_search` with beam 1 follows exactly the greedy path and,
  without penalties, returns exactly greedy's hypothesis; with penalties it may search on past
  greedy's EOS while a longer hypothesis could still score higher. `search` sends beam 1 to greedy.

    scoring        hypotheses, penalties, length limits, a step's constrained log-probabilities, prefixes
    left_to_right  greedy search and sampling
    beam           beam search, for a batch and for one sentence
    tree           the beam search tree the explorer draws

A runtime that runs its own search (a CTranslate2 export) is an `OwnSearchModel`: it gives what
`translate_ids` gives, and Translator calls it instead.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

import torch
from torch import Tensor

from heed.data.batching import sentence_batches, specials_of
from heed.decode_config import MAX_BEAM, MAX_OUTPUT_TOKENS, DecodeConfig
from heed.nn.protocol import Encoded, SearchModel, SearchState, Step
from heed.search.beam import beam_search, beam_search_one
from heed.search.left_to_right import greedy_search, sample
from heed.search.scoring import (
    Hypothesis,
    Prefix,
    coverage_penalty,
    hypothesis_score,
    length_penalty,
    max_output_lengths,
)
from heed.search.shortlist import Shortlist, needs_shortlist_model, restricted_to
from heed.search.tree import BeamTree, TreeNode

__all__ = ["MAX_BEAM", "MAX_OUTPUT_TOKENS", "BeamTree", "DecodeConfig", "Decoded", "Encoded", "Hypothesis", "OwnSearchModel", "Prefix",
           "SearchModel", "SearchState", "Step", "TreeNode", "beam_search", "beam_search_one", "coverage_penalty",
           "greedy_search", "hypothesis_score", "length_penalty", "max_output_lengths", "sample", "search",
           "translate_ids"]


def search(model: SearchModel, src: Tensor, src_lengths: Tensor, cfg: DecodeConfig | None = None, *,
           prefix: Prefix | None = None, trees: list[BeamTree | None] | None = None) -> list[list[Hypothesis]]:
    """Decode a batch: sampling when `cfg.sampling`, else greedy for beam_size 1 and beam search
    above. Returns n_best hypotheses per sentence, best first. `trees` receives one BeamTree per
    sentence from beam search, None per sentence from greedy search and sampling."""
    cfg = cfg or DecodeConfig()
    if cfg.sampling:
        out = sample(model, src, src_lengths, cfg, prefix=prefix)
    elif cfg.beam_size == 1:
        out = [[h] for h in greedy_search(model, src, src_lengths, cfg, prefix=prefix)]
    elif src.size(0) == 1 and trees is None and src.device.type == "cpu":
        out = [beam_search_one(model, src, src_lengths, cfg, prefix=prefix)]
    else:
        found: list[BeamTree] = []
        out = beam_search(model, src, src_lengths, cfg, prefix=prefix, trees=found if trees is not None else None)
        if trees is not None:
            trees.extend(found)
        return out
    if trees is not None:
        trees.extend([None] * len(out))
    return out


class Decoded(NamedTuple):
    """What `translate_ids` gives for one source: its n-best hypotheses, best first, and, when
    traced, its beam search tree (None for greedy search and sampling)."""

    hypotheses: list[Hypothesis]
    tree: BeamTree | None = None


@runtime_checkable
class OwnSearchModel(Protocol):
    """A runtime that runs its own search (heed.export.ct2_run.CT2Seq2Seq: CTranslate2's C++ search):
    Translator hands it the sources and the DecodeConfig instead of running heed.search over it."""

    has_attention: bool

    def num_parameters(self) -> int: ...

    def translate_ids(self, src_ids: Sequence[list[int]], cfg: DecodeConfig, *, batch_size: int = 64,
                      prefixes: Sequence[Sequence[int]] | None = None, free_prefix: int = 0, trace: bool = False,
                      stop: Callable[[], bool] | None = None, attention: bool = True) -> list[Decoded]:
        """What heed.search.translate_ids gives: per source (ids without specials), in input order,
        its n-best hypotheses (each prefix's tokens past the first `free_prefix` charged their
        log-probabilities); without `attention` their attention may be None (where it costs)."""
        ...



def translate_ids(model: SearchModel, src_ids: Sequence[list[int]], cfg: DecodeConfig, *, device: torch.device,
                  batch_size: int = 64, prefixes: Sequence[Sequence[int]] | None = None, free_prefix: int = 0,
                  trace: bool = False, shortlist: Shortlist | None = None) -> list[Decoded]:
    """Decode every source (ids without specials), in input order; sentences of similar length are
    batched together. `prefixes`: per source, output ids to force at the start ([] for none), the
    first `free_prefix` of each scored 0 (Prefix.free); `trace`: also return beam search trees;
    `shortlist`: each batch searches only its candidates (heed.search.shortlist; `model` a
    ShortlistModel, and no trace: a tree would hold the shortlist's positions)."""
    results: list[Decoded] = [Decoded([]) for _ in src_ids]
    for batch in sentence_batches(src_ids, batch_size=batch_size, specials=specials_of(model)):
        batch = batch.to(device)
        order = batch.indices.tolist()
        forced: Sequence[Sequence[int]] | None = None if prefixes is None else [prefixes[k] for k in order]
        searched: SearchModel = model
        if shortlist is not None:
            assert not trace, "a beam search tree is drawn over the whole vocabulary"
            restricted = restricted_to(needs_shortlist_model(model), shortlist, [src_ids[k] for k in order], forced,
                                       device)
            searched = restricted
            forced = None if forced is None else restricted.inward(forced)
        prefix = None if forced is None else Prefix.of(forced, pad_id=searched.pad_id, device=device, free=free_prefix)
        trees: list[BeamTree | None] | None = [] if trace else None
        hyps = search(searched, batch.src, batch.src_lengths, cfg, prefix=prefix, trees=trees)
        for i, (k, nbest) in enumerate(zip(order, hyps)):
            results[k] = Decoded(nbest if shortlist is None else restricted.outward(nbest),
                                 None if trees is None else trees[i])
    return results
