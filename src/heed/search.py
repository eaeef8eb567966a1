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
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from heed.data.batching import sentence_batches
from heed.data.vocab import UNK
from heed.decode_config import MAX_BEAM, MAX_OUTPUT_TOKENS, DecodeConfig  # noqa: F401  (DecodeConfig's home)
from heed.errors import ConfigError
from heed.nn.protocol import Encoded, SearchModel, SearchState, Step  # noqa: F401  (the protocol's home)

NEG_INF = float("-inf")


# The protocol search talks to lives in heed.nn.protocol (SearchModel, Encoded, SearchState, Step).


FORCED_FLOOR = -1e9  # the log-prob of a forced prefix token the model gives probability 0


@dataclass
class Hypothesis:
    """One decoded output.

    tokens:    ids, without BOS and EOS
    score:     the final ranking score, after the length and coverage penalties
    log_prob:  raw sum of token log-probabilities, EOS included
    attention: (len(tokens) + 1, src_len) the weights behind each output token and EOS, cut to the
               real length of this source (on the CPU); None for a model without attention
    node:      with `beam_search(..., trees=[])`, the id of the node that finished it in its tree
    """

    tokens: list[int]
    score: float
    log_prob: float
    attention: Tensor | None = None
    node: int | None = None  # its finished node in the sentence's BeamTree, when the search was traced


# ---------------------------------------------------------------------------------------------
# Penalties: pure functions, shared by greedy and beam search and by the tests.


def length_penalty(lengths: Tensor, alpha: float) -> Tensor:
    """Wu et al. 2016, eq. 14: lp(Y) = ((5 + |Y|) / (5 + 1))^alpha.

    lengths: (...) |Y|, output length with EOS. Returns float (...); all ones when alpha = 0."""
    return ((5.0 + lengths.float()) / 6.0) ** alpha


def coverage_penalty(attn_sum: Tensor, mask: Tensor, beta: float) -> Tensor:
    """Wu et al. 2016, eq. 14: cp(X; Y) = beta * sum_i log(min(sum_j p_ij, 1.0)), i over the real
    source positions, j over the output steps (EOS included). Never positive.

    attn_sum: (..., src_len) sum_j p_ij; mask: bool broadcastable to it, True = real token.
    Returns (...). A real position with no attention at all would give log 0 = -inf and make every
    such hypothesis tie; it is clamped to the smallest normal float instead (about -87 in float32).
    """
    if beta == 0.0:
        return attn_sum.new_zeros(attn_sum.shape[:-1])
    tiny = torch.finfo(attn_sum.dtype).tiny
    per_position = attn_sum.clamp(min=tiny, max=1.0).log().masked_fill(~mask, 0.0)  # (..., src_len)
    return beta * per_position.sum(-1)


def hypothesis_score(log_prob: Tensor, lengths: Tensor, coverage: Tensor | None, mask: Tensor | None,
                     cfg: DecodeConfig) -> Tensor:
    """Wu et al. 2016, eq. 14: s(Y, X) = log P(Y|X) / lp(Y) + cp(X; Y).

    log_prob (...), lengths (...) with EOS, coverage (..., src_len) or None when beta = 0."""
    score = log_prob / length_penalty(lengths, cfg.length_penalty)
    if cfg.coverage_penalty:
        score = score + coverage_penalty(coverage, mask, cfg.coverage_penalty)
    return score


def max_output_lengths(src_lengths: Tensor, cfg: DecodeConfig) -> Tensor:
    """(batch,) long: floor(max_len_a * src_len + max_len_b), output tokens without EOS, at most
    MAX_OUTPUT_TOKENS."""
    return torch.floor(cfg.max_len_a * src_lengths.double() + cfg.max_len_b).clamp(max=MAX_OUTPUT_TOKENS).long()


# ---------------------------------------------------------------------------------------------
# One step's constrained log-probabilities (both searches).


def _block_ngrams(logp: Tensor, seq: Tensor, n: int) -> None:
    """Forbid every token that would complete an n-gram already in the hypothesis.

    logp (rows, vocab), set to -inf in place at the banned tokens; seq (rows, t) the tokens emitted
    so far (no BOS). EOS is never banned: it never occurs in `seq`."""
    t = seq.size(1)
    if t < n:
        return
    windows = seq.unfold(1, n, 1)  # (rows, t - n + 1, n) every n-gram so far
    suffix = seq[:, t - n + 1:]  # (rows, n - 1) the n-gram being completed (empty for n = 1)
    matches = (windows[:, :, :-1] == suffix.unsqueeze(1)).all(-1)  # (rows, t - n + 1)
    # scatter_add, not scatter: several windows may name the same token.
    banned = torch.zeros_like(logp).scatter_add_(1, windows[:, :, -1], matches.to(logp.dtype)) > 0
    logp.masked_fill_(banned, NEG_INF)


def _step_log_probs(logits: Tensor, t: int, seq: Tensor | None, row_max_len: Tensor, cfg: DecodeConfig,
                    model: Any, *, may_be_full: bool, prefix: Prefix | None = None) -> Tensor:
    """log p(y_t | y_<t, x) with the search's constraints applied, for output position t.

    logits (rows, vocab); seq (rows, t) emitted tokens or None; row_max_len (rows,) long;
    may_be_full: whether any row may have reached its max_len (known on the host, so the common
    case skips the forced-EOS pass over (rows, vocab)); prefix: the rows' forced prefixes, or None.
    Returns (rows, vocab): -inf for PAD and BOS, for <unk> with forbid_unk, for EOS before min_len, for
    n-gram repeats, and for everything but EOS once a row has max_len tokens (forced EOS keeps its
    model log-prob);
    a row still inside its forced prefix gets -inf for every token but the forced one, which
    keeps its model log-prob whatever the constraints say."""
    logp = torch.log_softmax(logits.float(), dim=-1)  # (rows, vocab) a fresh tensor: edited in place
    eos = model.eos_id
    raw_eos = logp[:, eos].clone() if may_be_full else None  # (rows,)
    forced = None
    if prefix is not None and t < prefix.tokens.size(1):
        forced_token = prefix.tokens[:, t:t + 1]  # (rows, 1)
        # A forced token the model gives probability 0 stays forced, at a finite, hopeless log-prob.
        raw = logp.gather(1, forced_token).clamp(min=FORCED_FLOOR)
        forced = (prefix.lengths > t, forced_token, raw)  # (rows,), (rows, 1), (rows, 1)
    for banned in {model.pad_id, model.bos_id} - {eos}:
        logp[:, banned] = NEG_INF
    if cfg.forbid_unk:
        logp[:, UNK] = NEG_INF  # a copy model's copied words have ids of their own (heed.data.extended)
    if t < cfg.min_len:
        logp[:, eos] = NEG_INF
    if cfg.no_repeat_ngram and seq is not None:
        _block_ngrams(logp, seq, cfg.no_repeat_ngram)
    if may_be_full:
        full = row_max_len <= t  # (rows,) output full: EOS only
        logp.masked_fill_(full.unsqueeze(1), NEG_INF)
        logp[:, eos] = torch.where(full, raw_eos, logp[:, eos])
    if forced is not None:
        inside, forced_token, raw = forced
        logp.masked_fill_(inside.unsqueeze(1), NEG_INF)
        logp.scatter_(1, forced_token, torch.where(inside.unsqueeze(1), raw, logp.gather(1, forced_token)))
    return logp


class Prefix(NamedTuple):
    """Forced output prefixes: row r must start with tokens[r, :lengths[r]] (no BOS, no EOS).

    tokens (rows, prefix_len) long, right-padded with PAD; lengths (rows,) long, 0 = no prefix.
    The search continues after the prefix; its tokens keep their model log-probabilities, so a
    hypothesis' score is the model's score of the whole output, prefix included."""

    tokens: Tensor
    lengths: Tensor

    def select(self, rows: Tensor) -> "Prefix":
        return Prefix(self.tokens.index_select(0, rows), self.lengths.index_select(0, rows))

    def repeat(self, times: int) -> "Prefix":
        """Each row `times` times in a row (one per beam or sample)."""
        return Prefix(self.tokens.repeat_interleave(times, 0), self.lengths.repeat_interleave(times, 0))

    @staticmethod
    def of(prefixes: Sequence[Sequence[int]], *, pad_id: int, device: torch.device | str = "cpu") -> "Prefix":
        """From one list of ids per row (an empty list: no prefix)."""
        width = max(1, max(map(len, prefixes), default=0))
        tokens = torch.full((len(prefixes), width), pad_id, dtype=torch.long)
        for r, ids in enumerate(prefixes):
            tokens[r, :len(ids)] = torch.tensor(list(ids), dtype=torch.long)
        lengths = torch.tensor([len(ids) for ids in prefixes], dtype=torch.long)
        return Prefix(tokens.to(device), lengths.to(device))


def _with_prefix(max_len: Tensor, prefix: Prefix | None) -> Tensor:
    """max_len (batch,) raised to each forced prefix's length: a prefix is never cut."""
    return max_len if prefix is None else torch.maximum(max_len, prefix.lengths)


def _extremes(max_len: Tensor) -> tuple[int, int]:
    """The shortest and longest max_len of the batch, in one host sync before the step loop."""
    shortest, longest = torch.stack([max_len.min(), max_len.max()]).tolist()
    return shortest, longest


def _checked_attention(attention: Tensor | None, cfg: DecodeConfig) -> Tensor | None:
    if attention is None and cfg.coverage_penalty:
        raise ConfigError("the coverage penalty needs a model with attention; set it to 0",
                          field="coverage_penalty")
    return attention


def _all_rows(values: Tensor, index: Tensor, total: int, fill: float = 0) -> Tensor:
    """values (n, ...) placed at rows `index` (n,) of a (total, ...) tensor filled with `fill`;
    `values` itself while n == total (no sentence has left the batch, so index is every row)."""
    if values.size(0) == total:
        return values
    return values.new_full((total, *values.shape[1:]), fill).index_copy_(0, index, values)


def _to_hypotheses(tokens: Tensor, lengths: Tensor, scores: Tensor, log_probs: Tensor,
                   attention: Tensor | None, src_lengths: Tensor) -> list[Hypothesis]:
    """Rows into Hypothesis objects (one host transfer for everything).

    tokens (n, steps) long, lengths (n,) tokens without EOS, scores/log_probs (n,),
    attention (n, steps, src_len) or None, src_lengths (n,)."""
    tok, lens, sc, lp, srcl = (x.tolist() for x in (tokens.cpu(), lengths.cpu(), scores.cpu(),
                                                     log_probs.cpu(), src_lengths.cpu()))
    attn = None if attention is None else attention.cpu()
    return [
        Hypothesis(tokens=tok[i][:lens[i]], score=sc[i], log_prob=lp[i],
                   attention=None if attn is None else attn[i, :lens[i] + 1, :srcl[i]].clone())
        for i in range(len(tok))
    ]


# ---------------------------------------------------------------------------------------------
# Greedy search.


@torch.inference_mode()
def greedy_search(model: SearchModel, src: Tensor, src_lengths: Tensor, cfg: DecodeConfig | None = None, *,
                  prefix: Prefix | None = None) -> list[Hypothesis]:
    """The most likely token at every step, for the whole batch at once.

    src (batch, src_len), src_lengths (batch,). Returns one Hypothesis per sentence.
    `beam_size`, `n_best` and the sampling fields are ignored; every other field of `cfg` applies.
    `prefix`: outputs forced to start with these tokens (one row per sentence).
    Put the model in eval mode first (search does not change it)."""
    return _left_to_right(model, src, src_lengths, cfg or DecodeConfig(), prefix=prefix, noise=None)


class GumbelNoise:
    """Per-sentence random streams for sampling, so a sentence draws the same samples alone as in
    any batch: sentence b's `samples` rows read one (samples, vocab) block a step from a generator
    seeded with `seed`, whatever the other sentences do.

    Sampling by the Gumbel-max trick: argmax(log p + G), G = -log(-log U), U ~ uniform(0, 1),
    draws from p exactly (Gumbel 1954; Maddison et al. 2014), and needs only per-row noise."""

    def __init__(self, batch: int, samples: int, seed: int) -> None:
        self.samples = samples
        self.generators = [torch.Generator().manual_seed(seed) for _ in range(batch)]

    def __call__(self, rows: Tensor, vocab: int) -> Tensor:
        """Noise (n, vocab) for the active rows (n,), numbered sentence * samples + k. Every
        sentence with an active row draws its whole block, used or not, so its stream stays
        aligned with the step whatever its other samples did."""
        sentences = torch.unique(rows // self.samples)  # sorted
        blocks = torch.stack([self._block(b, vocab) for b in sentences.tolist()])  # (sentences, samples, vocab)
        slot = torch.searchsorted(sentences, rows // self.samples) * self.samples + rows % self.samples  # (n,)
        u = blocks.view(-1, vocab)[slot.cpu()].clamp_(min=1e-20, max=1.0 - 1e-7)
        return (-torch.log(-torch.log(u))).to(rows.device)

    def _block(self, sentence: int, vocab: int) -> Tensor:
        """Sentence `sentence`'s uniforms for one step, (samples, vocab). One seed a step comes from
        its stream and the block is drawn token by token (column-major), so token j's noise does
        not depend on `vocab`: a copy model's extended vocabulary, whose width depends on the
        other sources in the batch, leaves the sentence's samples as they are alone."""
        step_seed = int(torch.randint(0, 2**62, (1,), generator=self.generators[sentence]))
        return torch.rand(vocab, self.samples, generator=torch.Generator().manual_seed(step_seed)).t()


def _sampling_log_probs(logp: Tensor, cfg: DecodeConfig) -> Tensor:
    """The distribution samples are drawn from: the search's constrained log-probs (rows, vocab)
    sharpened by `temperature`, cut to the `top_k` most likely tokens and to the nucleus `top_p`
    (Holtzman et al. 2020: the fewest tokens, most likely first, whose probability reaches p).
    Returns (rows, vocab) unnormalised log-weights, -inf outside.

    Each row is shifted so its best token is at 0 before the division, in float64: any positive
    temperature then divides without overflow (1e-300 is greedy, not NaN; 1e300 is uniform over the
    allowed tokens), and a shift changes no row's distribution."""
    top = logp.max(dim=1, keepdim=True).values  # (rows, 1); -inf where no token is allowed
    shifted = torch.where(torch.isfinite(top), logp - top, logp)
    x = (shifted.double() / cfg.temperature).to(logp.dtype)
    if cfg.top_k and cfg.top_k < x.size(1):
        kth = x.topk(cfg.top_k, dim=1).values[:, -1:]  # (rows, 1)
        x = x.masked_fill(x < kth, NEG_INF)
    if cfg.top_p < 1.0:
        sorted_x, order = x.sort(dim=1, descending=True)
        probs = torch.softmax(sorted_x, dim=1)
        before = probs.cumsum(dim=1) - probs  # (rows, vocab) probability of the tokens ranked above
        cut = before >= cfg.top_p  # the first token is never cut
        x = x.scatter(1, order, sorted_x.masked_fill(cut, NEG_INF))
    return x


@torch.inference_mode()
def sample(model: SearchModel, src: Tensor, src_lengths: Tensor, cfg: DecodeConfig, *,
           prefix: Prefix | None = None) -> list[list[Hypothesis]]:
    """Draw `cfg.n_best` outputs per sentence from the model (temperature, top-k, nucleus), best
    score first. A sample's score is the model's own (untempered) log-probability of it, with the
    length and coverage penalties as in search. `cfg.seed` must be set (the caller picks one).

    src (batch, src_len), src_lengths (batch,); prefix: one row per sentence, or None."""
    if cfg.seed is None:
        raise ValueError("sample() needs cfg.seed; pick one (e.g. from torch.seed()) and report it")
    k, batch = cfg.n_best, src.size(0)
    rows = torch.arange(batch, device=src.device).repeat_interleave(k)  # (batch * k,) sentence of each row
    noise = GumbelNoise(batch, k, cfg.seed)
    hyps = _left_to_right(model, src.index_select(0, rows), src_lengths.index_select(0, rows), cfg,
                          prefix=None if prefix is None else prefix.repeat(k), noise=noise)
    return [sorted(hyps[b * k:(b + 1) * k], key=lambda h: -h.score) for b in range(batch)]


def _left_to_right(model: SearchModel, src: Tensor, src_lengths: Tensor, cfg: DecodeConfig, *,
                   prefix: Prefix | None, noise: GumbelNoise | None) -> list[Hypothesis]:
    """One token a step for every row: the most likely one (noise None) or a sample (Gumbel-max
    with `noise`). src (rows, src_len), src_lengths (rows,). Returns one Hypothesis per row."""
    batch, device = src.size(0), src.device
    enc = model.encode(src, src_lengths)
    src_mask = enc.mask  # (batch, src_len)
    state = model.init_state(enc)
    max_len = _with_prefix(max_output_lengths(src_lengths, cfg).to(device), prefix)  # (batch,)
    shortest, longest = _extremes(max_len)
    steps = longest + 1

    # A sentence that has emitted EOS leaves the batch (as in beam_search): `active` holds the ids
    # of the n sentences still decoding; the per-step outputs are scattered back to all of them.
    active = torch.arange(batch, device=device)  # (n,)
    act_max_len, act_prefix = max_len, prefix
    prev = torch.full((batch,), model.bos_id, dtype=torch.long, device=device)  # (n,)
    log_prob = torch.zeros(batch, device=device)
    seq = src.new_zeros(batch, 0) if cfg.no_repeat_ngram else None  # (n, t)
    coverage = None  # (batch, src_len) sum of the attention rows so far
    tokens, attention = [], []
    for t in range(steps):
        n = active.numel()
        out = model.step(prev, state, enc)
        attn = _checked_attention(out.attention, cfg)
        logp = _step_log_probs(out.logits, t, seq, act_max_len, cfg, model,
                               may_be_full=t >= shortest, prefix=act_prefix)  # (n, vocab)
        if noise is None:
            best, token = logp.max(dim=-1)  # (n,)
        else:
            drawn = _sampling_log_probs(logp, cfg) + noise(active, logp.size(1))  # (n, vocab)
            token = drawn.argmax(dim=-1)
            best = logp.gather(1, token.unsqueeze(1)).squeeze(1)
        # Where the constraints allow no token at all (min_len with n-gram blocking on a tiny vocabulary),
        # end the output: argmax over -inf would name PAD. Its score is then -inf, as in beam search.
        token = token.masked_fill(torch.isneginf(best), model.eos_id)
        if t >= shortest:
            token = token.masked_fill(act_max_len <= t, model.eos_id)  # even if the model gives EOS -inf
        log_prob = log_prob + best if n == batch else log_prob.index_add(0, active, best)
        tokens.append(_all_rows(token, active, batch, model.pad_id))
        if attn is not None:
            attn = _all_rows(attn.float(), active, batch)  # (batch, src_len), zero for the sentences already done
            attention.append(attn)
            if cfg.coverage_penalty:
                coverage = attn if coverage is None else coverage + attn
        if seq is not None:
            seq = torch.cat([seq, token.unsqueeze(1)], dim=1)
        done = token == model.eos_id  # (n,)
        state, prev = out.state, token
        # The one host sync per step: it costs a device round trip on a GPU, and saves running
        # every sentence to the longest max_len when all have ended earlier.
        n_done = int(done.sum())
        if n_done == n:
            break
        if n_done:
            keep = (~done).nonzero().squeeze(1)  # (n',)
            active, prev, act_max_len = active[keep], prev[keep], act_max_len[keep]
            state, enc = state.select(keep), enc.select(keep)
            if act_prefix is not None:
                act_prefix = act_prefix.select(keep)
            if seq is not None:
                seq = seq[keep]

    token_rows = torch.stack(tokens, dim=1)  # (batch, steps_run)
    lengths = (token_rows == model.eos_id).long().argmax(dim=1)  # position of EOS = tokens before it
    scores = hypothesis_score(log_prob, lengths + 1, coverage, src_mask, cfg)
    attn_rows = torch.stack(attention, dim=1) if attention else None  # (batch, steps_run, src_len)
    return _to_hypotheses(token_rows, lengths, scores, log_prob, attn_rows, src_lengths)


# ---------------------------------------------------------------------------------------------
# Beam search: flat (batch * beam) rows, row b * beam + k is beam k of sentence b.


class _CopiedStep(NamedTuple):
    """A Step's rows copied to every beam (beam_search's first step)."""

    logits: Tensor  # (batch * beam, vocab)
    state: Any
    attention: Tensor | None  # (batch * beam, src_len)


class _Finished(NamedTuple):
    """The n_best best finished hypotheses of each sentence, best first; empty slots score -inf.
    A hypothesis is named by the step that emitted its EOS and its parent's row at that step;
    its tokens and attention are recovered by `_backtrack` at the end."""

    score: Tensor  # (batch, n_best)
    log_prob: Tensor  # (batch, n_best)
    step: Tensor  # (batch, n_best) long
    row: Tensor  # (batch, n_best) long, flat row of the step's input

    def put(self, index: Tensor, part: "_Finished") -> "_Finished":
        """These sentences' rows replaced by `part`'s: index (n,) long, part (n, n_best)."""
        return _Finished(*(whole.index_copy(0, index, rows) for whole, rows in zip(self, part)))

    @staticmethod
    def empty(batch: int, n_best: int, device: torch.device) -> "_Finished":
        return _Finished(torch.full((batch, n_best), NEG_INF, device=device),
                         torch.full((batch, n_best), NEG_INF, device=device),
                         torch.zeros(batch, n_best, dtype=torch.long, device=device),
                         torch.zeros(batch, n_best, dtype=torch.long, device=device))


# _select_top's two-level search (_row_topk) pays from about this many vocabulary entries per
# candidate kept; below, one top-k over all beam * vocab extensions is faster (1 CPU thread:
# 2 * beam = 10 breaks even near 5,000 entries, 2 * beam = 4 near 2,000).
_TWO_LEVEL_MIN_VOCAB_PER_CANDIDATE = 500
# Width of the chunks in _row_topk's first pass: narrower chunks make the max pass scalar, wider
# ones make the second top-k longer; 64 measured fastest.
_TOPK_CHUNK = 64


def _row_topk(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The k largest values of each row, best first, and their columns, as `x.topk(k, dim=1)`
    gives them, in two levels: the maximum of each chunk of _TOPK_CHUNK columns (one vectorised
    pass), then the exact top k within the k chunks with the largest maxima, which hold the k
    largest values. x (rows, vocab) contiguous, vocab >= k * _TOPK_CHUNK. Returns values, columns,
    each (rows, k). Equal values may come in another order; a -inf value may name any column."""
    rows, vocab = x.shape
    width = _TOPK_CHUNK
    full = vocab // width
    maxima = x[:, :full * width].view(rows, full, width).amax(dim=2)  # (rows, full)
    if full * width < vocab:  # the last, shorter chunk
        maxima = torch.cat([maxima, x[:, full * width:].amax(dim=1, keepdim=True)], dim=1)
    _, chunk = maxima.topk(k, dim=1)  # (rows, k)
    columns = ((chunk * width).unsqueeze(2) + torch.arange(width, device=x.device)).view(rows, -1)
    beyond = columns >= vocab  # (rows, k * width) past the end of the short chunk: not candidates
    columns = columns.clamp_(max=vocab - 1)
    values = x.gather(1, columns).masked_fill_(beyond, NEG_INF)  # (rows, k * width)
    best, pick = values.topk(k, dim=1)  # (rows, k)
    return best, columns.gather(1, pick)


def _select_top(cum_log_prob: Tensor, logp: Tensor, beam: int) -> tuple[Tensor, Tensor, Tensor]:
    """The 2 * beam best one-token extensions of each sentence's live beams, best first: with at
    most `beam` of them EOS, at least `beam` continue.

    cum_log_prob (n * beam,), logp (n * beam, vocab). Returns cand_log_prob, token and parent beam
    index, each (n, 2 * beam). For a large vocabulary only each beam's own 2 * beam best tokens
    are ranked (an extension among its sentence's best 2 * beam is among them): for 2 * beam = 10,
    2.7 ms instead of 4.2 ms a step at 320 rows x 8,000 and 8.4 instead of 18 ms at 32,000."""
    k, vocab = 2 * beam, logp.size(1)
    n = cum_log_prob.numel() // beam
    if vocab < _TWO_LEVEL_MIN_VOCAB_PER_CANDIDATE * k:
        cand_log_prob, index = (cum_log_prob.unsqueeze(1) + logp).view(n, -1).topk(k, dim=1)
        return cand_log_prob, index % vocab, index // vocab
    top_logp, top_token = _row_topk(logp, k)  # (n * beam, k)
    cand = (cum_log_prob.unsqueeze(1) + top_logp).view(n, beam * k)
    cand_log_prob, pick = cand.topk(k, dim=1)  # (n, k)
    return cand_log_prob, top_token.view(n, beam * k).gather(1, pick), pick // k


def _finish(fin: _Finished, cand_log_prob: Tensor, token: Tensor, parent_row: Tensor, t: int,
            coverage: Tensor | None, src_mask: Tensor, cfg: DecodeConfig, eos_id: int) -> _Finished:
    """Move EOS candidates that rank within the top `beam` into the finished set (fairseq's rule:
    an EOS ranked below the beam would not have survived pruning, so it does not count).

    cand_log_prob, token, parent_row: (batch, beam) the top `beam` candidates; coverage
    (batch, beam, src_len) their attention sums with this step's row, or None; src_mask (batch, src_len)."""
    score = cand_log_prob  # (batch, beam); a -inf candidate scores -inf with any penalty: never finished
    if cfg.length_penalty or cfg.coverage_penalty:
        lengths = torch.full_like(token, t + 1)  # t tokens + EOS
        score = hypothesis_score(cand_log_prob, lengths, coverage, src_mask.unsqueeze(1), cfg)
    score = torch.where(token == eos_id, score, NEG_INF)
    all_score = torch.cat([fin.score, score], dim=1)  # (batch, n_best + beam)
    best, pick = all_score.topk(fin.score.size(1), dim=1)  # (batch, n_best)
    return _Finished(
        best,
        torch.cat([fin.log_prob, cand_log_prob], dim=1).gather(1, pick),
        torch.cat([fin.step, torch.full_like(token, t)], dim=1).gather(1, pick),
        torch.cat([fin.row, parent_row], dim=1).gather(1, pick),
    )


def _prune(cand_log_prob: Tensor, token: Tensor, parent_row: Tensor, beam: int,
           eos_id: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The `beam` best non-EOS candidates become the live beams.

    Inputs (batch, 2 * beam). Returns cum_log_prob, token, parent_row, each (batch * beam,), and
    the candidates picked (batch, beam); a beam with no finite candidate left is dead (-inf) and is
    never finished."""
    key = cand_log_prob.masked_fill(token == eos_id, NEG_INF)
    _, pick = key.topk(beam, dim=1)  # (batch, beam)
    live = key.gather(1, pick)
    return live.view(-1), token.gather(1, pick).view(-1), parent_row.gather(1, pick).view(-1), pick


def _is_done(fin: _Finished, cum_log_prob: Tensor, max_len: Tensor, cfg: DecodeConfig) -> Tensor:
    """(batch,) bool: the sentence holds n_best finished hypotheses no live beam can beat, or no
    live beam is left.

    A live beam with log-prob L <= 0 can only finish with log_prob <= L (log-probs only fall), in
    at most max_len + 1 steps, and with cp <= 0. As lp grows with length (alpha >= 0), its final
    score is at most L / lp(max_len + 1). Exact, so early stopping never changes the result;
    with beta > 0 the bound (cp <= 0) is loose and search tends to run longer.
    cum_log_prob (batch, beam); max_len (batch,)."""
    best_live = cum_log_prob.max(dim=1).values  # (batch,)
    bound = best_live / length_penalty(max_len + 1, cfg.length_penalty) if cfg.length_penalty else best_live
    return (fin.score[:, -1] >= bound) | torch.isneginf(best_live)


def _backtrack(fin_step: Tensor, fin_row: Tensor, tok_hist: Tensor, back_hist: Tensor,
               attn_hist: Tensor | None, eos_id: int, pad_id: int) -> tuple[Tensor, Tensor | None]:
    """Follow back-pointers from each finished hypothesis to the first step.

    fin_step, fin_row (n,): the step of its EOS and its parent's row there. tok_hist, back_hist
    (steps, batch * beam): at step s, live beam r was given token tok_hist[s, r] and came from row
    back_hist[s, r] of step s's input. attn_hist (steps, batch * beam, src_len): step s's attention
    per input row. Returns tokens (n, steps) (EOS then PAD after the end) and attention
    (n, steps, src_len), zero after the end.

    History + backtracking, rather than reordering every prefix's attention each step (and
    merging finished ones into a (batch, n_best, steps, src_len) buffer): the step loop then moves
    O(batch * beam * src_len) numbers per step instead of O(t * batch * beam * src_len).
    Measured for batch 64, beam 5, 30 steps, src_len 20 (CPU, 1 thread, shared machine):
    about 2 ms per batch for history + backtrack against about 30 ms for reordering, next to
    about 1.6 s for the whole decode of the bench's 256/8000 model.

    The walk runs on host lists, one pass over each hypothesis' steps, and then one gather moves
    the attention rows: a loop of tensor ops per step cost 5% of a beam-5 decode at batch 1."""
    n, steps = fin_step.numel(), tok_hist.size(0)
    device = fin_step.device
    tok, back = tok_hist.tolist(), back_hist.tolist()
    tokens = [[pad_id] * steps for _ in range(n)]
    hyp_index: list[int] = []
    step_index: list[int] = []
    row_index: list[int] = []  # the attention row of hypothesis hyp_index[k] at step step_index[k]
    for i, (end, row) in enumerate(zip(fin_step.tolist(), fin_row.tolist())):
        tokens[i][end] = eos_id
        hyp_index.append(i)
        step_index.append(end)
        row_index.append(row)  # the row that produced EOS
        for s in range(end - 1, -1, -1):  # `row`: a row of step s + 1's input
            parent = back[s][row]
            tokens[i][s] = tok[s][row]
            hyp_index.append(i)
            step_index.append(s)
            row_index.append(parent)
            row = parent
    attention = None
    if attn_hist is not None:
        attention = attn_hist.new_zeros(n, steps, attn_hist.size(-1))
        at_step = torch.tensor(step_index, dtype=torch.long, device=device)
        rows = torch.tensor(row_index, dtype=torch.long, device=device)
        attention[torch.tensor(hyp_index, dtype=torch.long, device=device), at_step] = attn_hist[at_step, rows]
    return torch.tensor(tokens, dtype=torch.long, device=device).view(n, steps), attention


@torch.inference_mode()
def beam_search(model: SearchModel, src: Tensor, src_lengths: Tensor, cfg: DecodeConfig | None = None, *,
                prefix: Prefix | None = None, trees: list[BeamTree] | None = None) -> list[list[Hypothesis]]:
    """Beam search for the whole batch at once, vectorised over batch * beam.

    src (batch, src_len), src_lengths (batch,). Returns, per sentence, up to n_best hypotheses,
    best score first (fewer only when the constraints leave fewer finite ones, e.g. min_len with
    n-gram blocking on a tiny vocabulary). Put the model in eval mode first.
    `prefix`: outputs forced to start with these tokens (one row per sentence); the beam widens
    after them. `trees`: a list to receive one BeamTree per sentence (the candidates of every
    step, kept, finished and pruned), and each hypothesis' `node`; it costs a host copy a step.

    Each step: log-probs of every live beam (_step_log_probs) -> the 2 * beam best extensions
    per sentence (_select_top) -> EOS ones among the top beam finish
    (_finish) -> the beam best others live on (_prune) and the decoder state follows them
    (state.select). A sentence is done once no live beam can beat its n_best-th finished one
    (_is_done); its beams are then killed. Tokens and attention are recovered at the end (_backtrack).
    """
    cfg = cfg or DecodeConfig()
    beam, device = cfg.beam_size, src.device
    batch = src.size(0)
    enc = model.encode(src, src_lengths)
    src_mask = enc.mask  # (batch, src_len)
    # The beams of a sentence start as copies of one row, so the first step runs once per sentence
    # and its output is copied to the beam rows (the step's work divided by beam).
    bos = torch.full((batch,), model.bos_id, dtype=torch.long, device=device)
    first = model.step(bos, model.init_state(enc), enc)
    copies = torch.arange(batch, device=device).repeat_interleave(beam)  # (batch * beam,) row -> sentence
    first_rows = _CopiedStep(
        first.logits.index_select(0, copies), first.state.select(copies),
        None if first.attention is None else first.attention.index_select(0, copies))
    prev, state = None, None  # the inputs of step t > 0, set at the end of step t - 1
    enc = enc.repeat(beam)  # batch * beam decoder rows, beam per source
    max_len = _with_prefix(max_output_lengths(src_lengths, cfg).to(device), prefix)  # (batch,)
    shortest, longest = _extremes(max_len)
    steps = longest + 1
    row_prefix = None if prefix is None else prefix.repeat(beam)  # the beams of a sentence share its prefix
    on_gpu = device.type != "cpu"
    recorded: list[_TraceStep] = []

    # A sentence that is done leaves the batch: its rows are dropped from the state and the
    # encoder output, so the late steps run only for the sentences still searching. `active`
    # holds their ids and `rows` the global row (sentence * beam + k) of each input row; the
    # history and the finished set speak in global rows, so backtracking never sees the shrinking.
    active = torch.arange(batch, device=device)  # (n,)
    rows = torch.arange(batch * beam, device=device)  # (n * beam,)
    beam_index = torch.arange(beam, device=device)
    first_row = rows[::beam].unsqueeze(1)  # (n, 1) each active sentence's first row in this step's input
    global_first_row = first_row  # (n, 1) and in the history (global rows)
    act_mask, act_max_len, row_max_len = src_mask, max_len, max_len.repeat_interleave(beam)

    # Only beam 0 of each sentence is live at first; the others start at -inf so the first step
    # does not fill the beam with copies of the same extension.
    cum = torch.full((batch, beam), NEG_INF, device=device)
    cum[:, 0] = 0.0
    cum = cum.view(-1)  # (n * beam,)
    seq = src.new_zeros(batch * beam, 0) if cfg.no_repeat_ngram else None  # (n * beam, t)
    coverage = None  # (n * beam, src_len) attention sums of the live beams
    act_fin = _Finished.empty(batch, cfg.n_best, device)  # (n, n_best) of the active sentences
    fin = _Finished.empty(batch, cfg.n_best, device)  # (batch, n_best) where they go when done
    tok_hist, back_hist, attn_hist = [], [], []
    for t in range(steps):
        n = active.numel()
        out = model.step(prev, state, enc) if t else first_rows
        attn = _checked_attention(out.attention, cfg)
        logp = _step_log_probs(out.logits, t, seq, row_max_len, cfg, model,
                               may_be_full=t >= shortest, prefix=row_prefix)  # (n * beam, vocab)
        cand_lp, token, parent = _select_top(cum, logp, beam)  # (n, 2 * beam)
        local_parent = parent + first_row  # rows of this input
        global_parent = parent + global_first_row

        cand_coverage = None
        if cfg.coverage_penalty:
            # (n * beam, src_len) each live beam's coverage including this step
            step_coverage = attn.float() if coverage is None else coverage + attn.float()
            cand_coverage = step_coverage[local_parent[:, :beam]]  # (n, beam, src_len)
        # Most steps finish nothing. On the CPU asking costs less than _finish's dozen small ops
        # (beam 5 at batch 1: 7% of the decode); on a GPU the question is a device sync, so it always runs.
        if on_gpu or bool((token[:, :beam] == model.eos_id).any()):
            act_fin = _finish(act_fin, cand_lp[:, :beam], token[:, :beam], global_parent[:, :beam], t,
                              cand_coverage, act_mask, cfg, model.eos_id)

        cum, live_token, back, picked = _prune(cand_lp, token, local_parent, beam, model.eos_id)  # (n * beam,)
        if trees is not None:
            recorded.append(_TraceStep(active.cpu(), cand_lp.cpu(), token.cpu(), parent.cpu(), picked.cpu()))
        done = _is_done(act_fin, cum.view(n, beam), act_max_len, cfg)  # (n,)

        # history: the new live beam k of sentence b is global row b * beam + k, like its input row
        tok_hist.append(_all_rows(live_token, rows, batch * beam, model.pad_id))
        back_hist.append(_all_rows(back if n == batch else rows[back], rows, batch * beam))
        if attn is not None:
            attn_hist.append(_all_rows(attn.float(), rows, batch * beam))
        # The one host sync per step (see greedy_search): how many sentences are done.
        n_done = int(done.sum())
        if n_done == n:
            break
        if n_done:  # the done sentences leave: keep the others' rows, in order
            keep = (~done).nonzero().squeeze(1)  # (n',)
            fin = fin.put(active, act_fin)
            act_fin = _Finished(*(part.index_select(0, keep) for part in act_fin))
            keep_rows = (keep.unsqueeze(1) * beam + beam_index).view(-1)  # (n' * beam,)
            active, rows, back = active[keep], rows[keep_rows], back[keep_rows]
            cum, live_token = cum[keep_rows], live_token[keep_rows]
            enc = enc.select(keep)
            act_mask, act_max_len, row_max_len = act_mask[keep], act_max_len[keep], row_max_len[keep_rows]
            if row_prefix is not None:
                row_prefix = row_prefix.select(keep_rows)
            first_row, global_first_row = first_row[:keep.numel()], (active * beam).unsqueeze(1)
        if seq is not None:
            seq = torch.cat([seq.index_select(0, back), live_token.unsqueeze(1)], dim=1)
        if cfg.coverage_penalty:
            coverage = step_coverage.index_select(0, back)
        state = out.state.select(back)
        prev = live_token
    fin = fin.put(active, act_fin)

    fin_step, fin_row = fin.step.reshape(-1), fin.row.reshape(-1)  # (batch * n_best,)
    tokens, attention = _backtrack(fin_step, fin_row, torch.stack(tok_hist), torch.stack(back_hist),
                                   torch.stack(attn_hist) if attn_hist else None, model.eos_id, model.pad_id)
    hyps = _to_hypotheses(tokens, fin_step, fin.score.reshape(-1), fin.log_prob.reshape(-1), attention,
                          src_lengths.repeat_interleave(cfg.n_best))
    if trees is not None:
        trees.extend(_build_trees(recorded, batch, beam, model.eos_id, hyps, fin.step.cpu(), fin.row.cpu(), cfg))
    valid = torch.isfinite(fin.score).cpu().tolist()  # (batch, n_best) empty slots are -inf
    return [[h for h, ok in zip(hyps[b * cfg.n_best:(b + 1) * cfg.n_best], valid[b]) if ok]
            for b in range(batch)]


# ---------------------------------------------------------------------------------------------
# Beam search for one sentence: its bookkeeping on host lists.


@torch.inference_mode()
def beam_search_one(model: SearchModel, src: Tensor, src_lengths: Tensor, cfg: DecodeConfig | None = None, *,
                    prefix: Prefix | None = None) -> list[Hypothesis]:
    """`beam_search` for a batch of one sentence: the same hypotheses, scores and attention, with
    the bookkeeping after each step's top-k (finishing, pruning, stopping, the history) done on
    Python lists of its 2 * beam candidates instead of some 25 small tensor ops. At batch 1 those
    ops cost more than a small model's step (bench/RESULTS.md, "Beam search for one sentence").
    The model's step, the constrained log-probs (_step_log_probs), the candidate top-k
    (_select_top) and the penalties are beam_search's own functions, so ties break the same way.

    src (1, src_len), src_lengths (1,); prefix: one row, or None. Returns up to n_best
    hypotheses, best score first. Put the model in eval mode first."""
    cfg = cfg or DecodeConfig()
    beam, eos, device = cfg.beam_size, model.eos_id, src.device
    enc = model.encode(src, src_lengths)
    src_mask, src_len = enc.mask, int(src_lengths[0])
    max_len_t = _with_prefix(max_output_lengths(src_lengths, cfg).to(device), prefix)  # (1,) broadcasts over rows
    max_len = int(max_len_t[0])
    bound_lp = np.float32(length_penalty(max_len_t + 1, cfg.length_penalty)[0]) if cfg.length_penalty else None
    row_prefix = None if prefix is None else prefix.repeat(beam)

    # The first step runs on the sentence's one row; its candidates are ranked as beam_search ranks
    # them, over beam copies of the row of which only the first is live.
    bos = torch.full((1,), model.bos_id, dtype=torch.long, device=device)
    out = model.step(bos, model.init_state(enc), enc)
    enc = enc.repeat(beam)
    cum = torch.full((beam,), NEG_INF, device=device)
    cum[0] = 0.0
    seq = src.new_zeros(beam, 0) if cfg.no_repeat_ngram else None  # (beam, t) the live beams' tokens
    coverage = None  # (beam, src_len) the live beams' attention sums
    finished: list[tuple[float, float, int, int]] = []  # (score, log_prob, step, parent row), best first
    tok_hist: list[list[int]] = []  # [t][k]: live beam k's token after step t
    back_hist: list[list[int]] = []  # [t][k]: the row of step t's input it extends
    attn_hist: list[np.ndarray] = []  # [t]: step t's attention, (rows of its input, src_len)
    for t in range(max_len + 1):
        attn = _checked_attention(out.attention, cfg)
        logits = out.logits if t else out.logits.expand(beam, -1).contiguous()
        logp = _step_log_probs(logits, t, seq, max_len_t, cfg, model, may_be_full=t >= max_len, prefix=row_prefix)
        cand_lp, token, parent = (x[0].tolist() for x in _select_top(cum, logp, beam))  # 2 * beam each
        if not t:
            parent = [0] * len(parent)  # the copies are the first step's one row
        step_coverage = None
        if cfg.coverage_penalty:
            step_coverage = attn.float() if coverage is None else coverage + attn.float()  # (rows, src_len)

        ends = [c for c in range(beam) if token[c] == eos and cand_lp[c] != NEG_INF]
        if ends:
            end_lp = torch.tensor([cand_lp[c] for c in ends], device=device)
            rows = torch.tensor([parent[c] for c in ends], device=device)
            scores = hypothesis_score(end_lp, torch.full_like(rows, t + 1),
                                      None if step_coverage is None else step_coverage.index_select(0, rows),
                                      src_mask, cfg).tolist()
            finished += [(score, cand_lp[c], t, parent[c]) for score, c in zip(scores, ends)]
            finished = sorted(finished, key=lambda f: -f[0])[:cfg.n_best]

        # The beam best others live on (at most beam of the 2 * beam are EOS); -inf ones are dead.
        live = [c for c in range(2 * beam) if token[c] != eos][:beam]
        live_lp = [cand_lp[c] for c in live]
        back = [parent[c] for c in live]
        tok_hist.append([token[c] for c in live])
        back_hist.append(back)
        if attn is not None:
            attn_hist.append(attn.float().numpy())
        best_live = max(live_lp)
        if best_live == NEG_INF:
            break
        if len(finished) == cfg.n_best:  # as _is_done, in float32 as beam_search computes it
            bound = np.float32(best_live) / bound_lp if bound_lp is not None else best_live
            if finished[-1][0] >= bound:
                break
        if t == max_len:
            break
        # numpy, then torch: a third of torch.tensor's cost for a few numbers (the search runs on the CPU)
        back_t = torch.from_numpy(np.array(back, dtype=np.int64))
        prev = torch.from_numpy(np.array(tok_hist[-1], dtype=np.int64))
        cum = torch.from_numpy(np.array(live_lp, dtype=np.float32))
        if seq is not None:
            seq = torch.cat([seq.index_select(0, back_t), prev.unsqueeze(1)], dim=1)
        if step_coverage is not None:
            coverage = step_coverage.index_select(0, back_t)
        out = model.step(prev, out.state.select(back_t), enc)
    return [_backtrack_one(f, tok_hist, back_hist, attn_hist, src_len, eos) for f in finished]


def _backtrack_one(fin: tuple[float, float, int, int], tok_hist: list[list[int]], back_hist: list[list[int]],
                   attn_hist: list[np.ndarray], src_len: int, eos_id: int) -> Hypothesis:
    """One finished hypothesis (score, log_prob, the step of its EOS, its parent's row there) of
    beam_search_one, its tokens and attention followed back through the history (as _backtrack)."""
    score, log_prob, end, row = fin
    tokens: list[int] = []
    attention_rows = [(end, row)]
    for s in range(end - 1, -1, -1):  # `row`: a row of step s + 1's input
        tokens.append(tok_hist[s][row])
        row = back_hist[s][row]
        attention_rows.append((s, row))
    attention = None
    if attn_hist:
        attention = torch.from_numpy(np.stack([attn_hist[s][r, :src_len] for s, r in reversed(attention_rows)]))
    return Hypothesis(tokens=tokens[::-1], score=score, log_prob=log_prob, attention=attention)


# ---------------------------------------------------------------------------------------------
# The search tree, for people: what beam search kept, finished and pruned at every step.


@dataclass
class TreeNode:
    """One candidate of one step: `token` appended to its `parent` node's output.

    step: the output position (-1 for the root, before the first token); log_prob: cumulative;
    score: the ranking score of a finished node (its hypothesis' score where it is in the n-best;
    else log_prob / lp, without the coverage penalty), else its log_prob;
    status: "root", "kept" (live in the beam), "finished" (ended with EOS among the step's best
    `beam`) or "pruned" (among the step's 2 * beam best candidates, but dropped)."""

    id: int
    parent: int | None
    step: int
    token: int | None
    log_prob: float
    score: float
    status: str


@dataclass
class BeamTree:
    """Every finite candidate beam search ranked for one sentence, as a tree rooted at BOS."""

    nodes: list[TreeNode]


class _TraceStep(NamedTuple):
    """One step's candidates, copied to the CPU: active (n,) sentence ids; cand_log_prob, token,
    parent (n, 2 * beam) with parent the live beam slot extended; picked (n, beam) the candidates
    that live on, by column."""

    active: Tensor
    cand_log_prob: Tensor
    token: Tensor
    parent: Tensor
    picked: Tensor


def _build_trees(recorded: Sequence[_TraceStep], batch: int, beam: int, eos_id: int, hyps: Sequence[Hypothesis],
                 fin_step: Tensor, fin_row: Tensor, cfg: DecodeConfig) -> list[BeamTree]:
    """One BeamTree per sentence from the recorded steps; sets each finished hypothesis' `node`.
    hyps (batch * n_best) with fin_step, fin_row (batch, n_best) as beam_search keeps them."""
    trees = [BeamTree([TreeNode(0, None, -1, None, 0.0, 0.0, "root")]) for _ in range(batch)]
    live = [[0] * beam for _ in range(batch)]  # node id of each live beam slot; only slot 0 at first
    finished: dict[tuple[int, int, int], int] = {}  # (sentence, step, parent slot) -> node id
    for t, rec in enumerate(recorded):
        lp, tok, par, picked = (x.tolist() for x in rec[1:])
        for i, b in enumerate(rec.active.tolist()):
            nodes, slot_node = trees[b].nodes, {}
            kept = {c: k for k, c in enumerate(picked[i])}
            for c in range(2 * beam):
                if lp[i][c] == NEG_INF:
                    continue
                if tok[i][c] == eos_id:
                    # Only an EOS among the best `beam` finishes (_finish); one below can still fill
                    # a spare beam slot when too few candidates are finite, as a dead beam: pruned.
                    status = "finished" if c < beam else "pruned"
                    score = lp[i][c] / float(length_penalty(torch.tensor(t + 1), cfg.length_penalty))
                elif c in kept:
                    status, score = "kept", lp[i][c]
                else:
                    status, score = "pruned", lp[i][c]
                node = TreeNode(len(nodes), live[b][par[i][c]], t, tok[i][c], lp[i][c], score, status)
                nodes.append(node)
                if status == "finished":
                    finished[(b, t, par[i][c])] = node.id
                elif status == "kept":
                    slot_node[kept[c]] = node.id
            live[b] = [slot_node.get(k, 0) for k in range(beam)]
    n_best = fin_step.size(1)
    for b in range(batch):
        for j in range(n_best):
            h = hyps[b * n_best + j]
            if not math.isfinite(h.score):  # an empty slot (fewer than n_best finished): no node
                continue
            node_id = finished.get((b, int(fin_step[b, j]), int(fin_row[b, j]) - b * beam))
            if node_id is not None:
                h.node = node_id
                trees[b].nodes[node_id].score = h.score
    return trees


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


def translate_ids(model: SearchModel, src_ids: Sequence[list[int]], cfg: DecodeConfig, *, device: torch.device,
                  batch_size: int = 64, prefixes: Sequence[Sequence[int]] | None = None,
                  trace: bool = False) -> list[Decoded]:
    """Decode every source (ids without specials), in input order; sentences of similar length are
    batched together. `prefixes`: per source, output ids to force at the start ([] for none);
    `trace`: also return beam search trees."""
    results: list[Decoded] = [Decoded([]) for _ in src_ids]
    for batch in sentence_batches(src_ids, batch_size=batch_size):
        batch = batch.to(device)
        order = batch.indices.tolist()
        prefix = None if prefixes is None else Prefix.of([prefixes[k] for k in order], pad_id=model.pad_id,
                                                         device=device)
        trees: list[BeamTree | None] | None = [] if trace else None
        hyps = search(model, batch.src, batch.src_lengths, cfg, prefix=prefix, trees=trees)
        for i, (k, nbest) in enumerate(zip(order, hyps)):
            results[k] = Decoded(nbest, None if trees is None else trees[i])
    return results
