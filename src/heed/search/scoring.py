"""What every search shares: hypotheses and their scores (length and coverage penalties), the
length limits, one step's log-probabilities under the decoding constraints, and forced prefixes."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from heed.decode_config import MAX_OUTPUT_TOKENS, DecodeConfig
from heed.errors import ConfigError

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


def length_penalty(lengths: Tensor, alpha: float, norm: str = "gnmt") -> Tensor:
    """Wu et al. 2016, eq. 14: lp(Y) = ((5 + |Y|) / (5 + 1))^alpha; with norm "power",
    lp(Y) = |Y|^alpha (fairseq's lenpen and Hugging Face's length_penalty).

    lengths: (...) |Y|, output length with EOS. Returns float (...); all ones when alpha = 0.
    Both grow with |Y| for alpha >= 0, which beam search's exact stopping bound relies on."""
    if norm == "power":
        return lengths.float() ** alpha
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
    score = log_prob / length_penalty(lengths, cfg.length_penalty, cfg.length_norm)
    if cfg.coverage_penalty:
        assert coverage is not None and mask is not None, "the coverage penalty's attention sums and mask"
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


def step_log_probs(logits: Tensor, t: int, seq: Tensor | None, row_max_len: Tensor, cfg: DecodeConfig,
                    model: Any, *, may_be_full: bool, prefix: Prefix | None = None) -> Tensor:
    """log p(y_t | y_<t, x) with the search's constraints applied, for output position t.

    logits (rows, vocab); seq (rows, t) emitted tokens or None; row_max_len (rows,) long;
    may_be_full: whether any row may have reached its max_len (known on the host, so the common
    case skips the forced-EOS pass over (rows, vocab)); prefix: the rows' forced prefixes, or None.
    Returns (rows, vocab): -inf for PAD and BOS, for <unk> with forbid_unk, for EOS before min_len, for
    n-gram repeats, and for everything but EOS once a row has max_len tokens (forced EOS keeps its
    model log-prob);
    a row still inside its forced prefix gets -inf for every token but the forced one, which
    keeps its model log-prob whatever the constraints say (0 within the prefix's `free` tokens)."""
    logp = torch.log_softmax(logits.float(), dim=-1)  # (rows, vocab) a fresh tensor: edited in place
    eos = model.eos_id
    raw_eos = logp[:, eos].clone() if may_be_full else None  # (rows,)
    forced = None
    if prefix is not None and t < prefix.tokens.size(1):
        forced_token = prefix.tokens[:, t:t + 1]  # (rows, 1)
        # A forced token the model gives probability 0 stays forced, at a finite, hopeless log-prob.
        raw = logp.gather(1, forced_token).clamp(min=FORCED_FLOOR)
        if t < prefix.free:  # a token the model is told, not asked: it costs nothing
            raw = torch.zeros_like(raw)
        forced = (prefix.lengths > t, forced_token, raw)  # (rows,), (rows, 1), (rows, 1)
    for banned in {model.pad_id, model.bos_id} - {eos}:
        logp[:, banned] = NEG_INF
    if cfg.forbid_unk:
        logp[:, model.unk_id] = NEG_INF  # a copy model's copied words have ids of their own (heed.data.extended)
    if t < cfg.min_len:
        logp[:, eos] = NEG_INF
    if cfg.no_repeat_ngram and seq is not None:
        _block_ngrams(logp, seq, cfg.no_repeat_ngram)
    if raw_eos is not None:  # may_be_full
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
    hypothesis' score is the model's score of the whole output, prefix included; but the first
    `free` tokens of every row (a many-language model's target language token: heed.data.codec
    .Codec.target_frame) score 0, as Hugging Face's forced_bos_token_id and fairseq's prefix do:
    the model is told them, it does not choose them. They count in the output's length."""

    tokens: Tensor
    lengths: Tensor
    free: int = 0

    def select(self, rows: Tensor) -> Prefix:
        return Prefix(self.tokens.index_select(0, rows), self.lengths.index_select(0, rows), self.free)

    def repeat(self, times: int) -> Prefix:
        """Each row `times` times in a row (one per beam or sample)."""
        return Prefix(self.tokens.repeat_interleave(times, 0), self.lengths.repeat_interleave(times, 0), self.free)

    @staticmethod
    def of(prefixes: Sequence[Sequence[int]], *, pad_id: int, device: torch.device | str = "cpu",
           free: int = 0) -> Prefix:
        """From one list of ids per row (an empty list: no prefix); each row's first `free` ids score 0."""
        width = max(1, max(map(len, prefixes), default=0))
        tokens = torch.full((len(prefixes), width), pad_id, dtype=torch.long)
        for r, ids in enumerate(prefixes):
            tokens[r, :len(ids)] = torch.tensor(list(ids), dtype=torch.long)
        lengths = torch.tensor([len(ids) for ids in prefixes], dtype=torch.long)
        return Prefix(tokens.to(device), lengths.to(device), free)


def with_prefix(max_len: Tensor, prefix: Prefix | None) -> Tensor:
    """max_len (batch,) raised to each forced prefix's length: a prefix is never cut."""
    return max_len if prefix is None else torch.maximum(max_len, prefix.lengths)


def extremes(max_len: Tensor) -> tuple[int, int]:
    """The shortest and longest max_len of the batch, in one host sync before the step loop."""
    shortest, longest = torch.stack([max_len.min(), max_len.max()]).tolist()
    return shortest, longest


def checked_attention(attention: Tensor | None, cfg: DecodeConfig) -> Tensor | None:
    if attention is None and cfg.coverage_penalty:
        raise ConfigError("the coverage penalty needs a model with attention; set it to 0",
                          field="coverage_penalty")
    return attention


def all_rows(values: Tensor, index: Tensor, total: int, fill: float = 0) -> Tensor:
    """values (n, ...) placed at rows `index` (n,) of a (total, ...) tensor filled with `fill`;
    `values` itself while n == total (no sentence has left the batch, so index is every row)."""
    if values.size(0) == total:
        return values
    return values.new_full((total, *values.shape[1:]), fill).index_copy_(0, index, values)


def to_hypotheses(tokens: Tensor, lengths: Tensor, scores: Tensor, log_probs: Tensor,
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
