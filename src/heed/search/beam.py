"""Beam search: for a batch, vectorised over batch x beam (`beam_search`), and for one sentence on
the CPU with its bookkeeping on host lists (`beam_search_one`); the same hypotheses.

A sentence's search ends (DecodeConfig.stopping) with "exact" once no live beam can beat its n_best-th
finished hypothesis (`_is_done`: the result of searching to max_len), with "beam" once `beam`
hypotheses have finished, counting each EOS among a step's best `beam` candidates (`_finish`), as
fairseq, Marian, CTranslate2 (patience 1) and Hugging Face's early_stopping=True count them; either
way at max_len, where EOS is forced on every live beam.

Flat (batch * beam) rows: row b * beam + k is beam k of sentence b."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from heed.decode_config import DecodeConfig
from heed.nn.protocol import SearchModel
from heed.search.scoring import (
    NEG_INF,
    Hypothesis,
    Prefix,
    all_rows,
    checked_attention,
    extremes,
    hypothesis_score,
    length_penalty,
    max_output_lengths,
    step_log_probs,
    to_hypotheses,
    with_prefix,
)
from heed.search.tree import BeamTree, TraceStep, build_trees


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
    ended: Tensor  # (batch,) long: hypotheses finished so far, kept or not (DecodeConfig.stopping "beam")

    def put(self, index: Tensor, part: _Finished) -> _Finished:
        """These sentences' rows replaced by `part`'s: index (n,) long, part (n, n_best) and (n,)."""
        return _Finished(*(whole.index_copy(0, index, rows) for whole, rows in zip(self, part)))

    @staticmethod
    def empty(batch: int, n_best: int, device: torch.device) -> _Finished:
        return _Finished(torch.full((batch, n_best), NEG_INF, device=device),
                         torch.full((batch, n_best), NEG_INF, device=device),
                         torch.zeros(batch, n_best, dtype=torch.long, device=device),
                         torch.zeros(batch, n_best, dtype=torch.long, device=device),
                         torch.zeros(batch, dtype=torch.long, device=device))


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
    an EOS ranked below the beam would not have survived pruning, so it does not count), and count
    them (a finite one each).

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
        fin.ended + torch.isfinite(score).sum(dim=1),
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
    """(batch,) bool: no live beam is left, or with stopping "beam" `beam` hypotheses have finished, or
    with stopping "exact" the sentence holds n_best finished hypotheses no live beam can beat.

    A live beam with log-prob L <= 0 can only finish with log_prob <= L (log-probs only fall), in
    at most max_len + 1 steps, and with cp <= 0. As lp grows with length (alpha >= 0), its final
    score is at most L / lp(max_len + 1). Exact, so early stopping never changes the result;
    with beta > 0 the bound (cp <= 0) is loose and search tends to run longer.
    cum_log_prob (batch, beam); max_len (batch,)."""
    best_live = cum_log_prob.max(dim=1).values  # (batch,)
    if cfg.stopping == "beam":
        return (fin.ended >= cfg.beam_size) | torch.isneginf(best_live)
    bound = best_live / length_penalty(max_len + 1, cfg.length_penalty, cfg.length_norm) if cfg.length_penalty else best_live
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


@dataclass
class _Active:
    """The sentences still searching, and what is kept per sentence or per row for them only.

    A sentence that is done leaves the batch: its rows are dropped from the state and the encoder
    output, so the late steps run only for the sentences still searching. `ids` holds their ids and
    `rows` the global row (sentence * beam + k) of each input row; the history and the finished set
    speak in global rows, so backtracking never sees the shrinking."""

    ids: Tensor  # (n,)
    rows: Tensor  # (n * beam,)
    first_row: Tensor  # (n, 1) each sentence's first row in this step's input
    global_first_row: Tensor  # (n, 1) and in the history (global rows)
    mask: Tensor  # (n, src_len)
    max_len: Tensor  # (n,)
    row_max_len: Tensor  # (n * beam,)
    prefix: Prefix | None  # the rows' forced prefixes
    enc: Any  # Encoded, beam rows per sentence
    fin: _Finished  # (n, n_best)

    def keep(self, keep: Tensor, beam: int) -> Tensor:
        """Keep the sentences `keep` (n',) of the n, in order; returns their rows (n' * beam,)."""
        keep_rows = (keep.unsqueeze(1) * beam + torch.arange(beam, device=keep.device)).view(-1)
        self.ids, self.rows = self.ids[keep], self.rows[keep_rows]
        self.fin = _Finished(*(part.index_select(0, keep) for part in self.fin))
        self.enc = self.enc.select(keep)
        self.mask, self.max_len, self.row_max_len = self.mask[keep], self.max_len[keep], self.row_max_len[keep_rows]
        if self.prefix is not None:
            self.prefix = self.prefix.select(keep_rows)
        self.first_row, self.global_first_row = self.first_row[:keep.numel()], (self.ids * beam).unsqueeze(1)
        return keep_rows


@dataclass
class _History:
    """Each step's live tokens, back-pointers and attention, in global rows (for `_backtrack`)."""

    total_rows: int  # batch * beam
    pad_id: int
    tokens: list[Tensor] = field(default_factory=list)
    back: list[Tensor] = field(default_factory=list)
    attention: list[Tensor] = field(default_factory=list)

    def add(self, live_token: Tensor, back: Tensor, attention: Tensor | None, rows: Tensor) -> None:
        """The new live beam k of sentence b is global row b * beam + k, like its input row."""
        self.tokens.append(all_rows(live_token, rows, self.total_rows, self.pad_id))
        self.back.append(all_rows(back, rows, self.total_rows))
        if attention is not None:
            self.attention.append(all_rows(attention.float(), rows, self.total_rows))


def _first_step(model: SearchModel, src: Tensor, src_lengths: Tensor, cfg: DecodeConfig,
                prefix: Prefix | None) -> tuple[_CopiedStep, _Active]:
    """Encode, and run the first step once per sentence: the beams of a sentence start as copies of
    one row, so its output is copied to the beam rows (the step's work divided by beam)."""
    beam, device, batch = cfg.beam_size, src.device, src.size(0)
    enc = model.encode(src, src_lengths)
    bos = torch.full((batch,), model.bos_id, dtype=torch.long, device=device)
    first = model.step(bos, model.init_state(enc), enc)
    copies = torch.arange(batch, device=device).repeat_interleave(beam)  # (batch * beam,) row -> sentence
    first_rows = _CopiedStep(
        first.logits.index_select(0, copies), first.state.select(copies),
        None if first.attention is None else first.attention.index_select(0, copies))
    max_len = with_prefix(max_output_lengths(src_lengths, cfg).to(device), prefix)  # (batch,)
    rows = torch.arange(batch * beam, device=device)
    first_row = rows[::beam].unsqueeze(1)
    return first_rows, _Active(
        torch.arange(batch, device=device), rows, first_row, first_row, enc.mask, max_len,
        max_len.repeat_interleave(beam), None if prefix is None else prefix.repeat(beam), enc.repeat(beam),
        _Finished.empty(batch, cfg.n_best, device))


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

    Each step: log-probs of every live beam (step_log_probs) -> the 2 * beam best extensions
    per sentence (_select_top) -> EOS ones among the top beam finish
    (_finish) -> the beam best others live on (_prune) and the decoder state follows them
    (state.select). A sentence is done once no live beam can beat its n_best-th finished one, or
    with stopping "beam" once `beam` finished (_is_done); it then leaves the batch (_Active.keep). Tokens and attention are recovered at the
    end (_backtrack).
    """
    cfg = cfg or DecodeConfig()
    beam, device, batch = cfg.beam_size, src.device, src.size(0)
    first_rows, act = _first_step(model, src, src_lengths, cfg, prefix)
    shortest, longest = extremes(act.max_len)
    on_gpu = device.type != "cpu"
    recorded: list[TraceStep] = []
    history = _History(batch * beam, model.pad_id)
    # Only beam 0 of each sentence is live at first; the others start at -inf so the first step
    # does not fill the beam with copies of the same extension.
    cum = torch.full((batch, beam), NEG_INF, device=device)
    cum[:, 0] = 0.0
    cum = cum.view(-1)  # (n * beam,)
    seq = src.new_zeros(batch * beam, 0) if cfg.no_repeat_ngram else None  # (n * beam, t)
    prev, state, coverage = None, None, None  # step t > 0's inputs; (n * beam, src_len) attention sums
    fin = _Finished.empty(batch, cfg.n_best, device)  # (batch, n_best) where the done sentences' go
    for t in range(longest + 1):
        n = act.ids.numel()
        if t:
            assert prev is not None and state is not None  # step t - 1's
            out = model.step(prev, state, act.enc)
        else:
            out = first_rows
        attn = checked_attention(out.attention, cfg)
        logp = step_log_probs(out.logits, t, seq, act.row_max_len, cfg, model,
                               may_be_full=t >= shortest, prefix=act.prefix)  # (n * beam, vocab)
        cand_lp, token, parent = _select_top(cum, logp, beam)  # (n, 2 * beam)
        local_parent = parent + act.first_row  # rows of this input
        step_coverage = None  # (n * beam, src_len) each live beam's coverage including this step
        if cfg.coverage_penalty:
            assert attn is not None  # checked_attention refused a model without attention
            step_coverage = attn.float() if coverage is None else coverage + attn.float()
        # Most steps finish nothing. On the CPU asking costs less than _finish's dozen small ops
        # (beam 5 at batch 1: 7% of the decode); on a GPU the question is a device sync, so it always runs.
        if on_gpu or bool((token[:, :beam] == model.eos_id).any()):
            act.fin = _finish(act.fin, cand_lp[:, :beam], token[:, :beam], (parent + act.global_first_row)[:, :beam],
                              t, None if step_coverage is None else step_coverage[local_parent[:, :beam]],
                              act.mask, cfg, model.eos_id)
        cum, live_token, back, picked = _prune(cand_lp, token, local_parent, beam, model.eos_id)  # (n * beam,)
        if trees is not None:
            recorded.append(TraceStep(act.ids.cpu(), cand_lp.cpu(), token.cpu(), parent.cpu(), picked.cpu()))
        done = _is_done(act.fin, cum.view(n, beam), act.max_len, cfg)  # (n,)
        history.add(live_token, back if n == batch else act.rows[back], attn, act.rows)
        n_done = int(done.sum())  # the one host sync per step (see greedy_search): how many are done
        if n_done == n:
            break
        if n_done:  # the done sentences leave: keep the others' rows, in order
            fin = fin.put(act.ids, act.fin)
            keep_rows = act.keep((~done).nonzero().squeeze(1), beam)
            back, cum, live_token = back[keep_rows], cum[keep_rows], live_token[keep_rows]
        if seq is not None:
            seq = torch.cat([seq.index_select(0, back), live_token.unsqueeze(1)], dim=1)
        if step_coverage is not None:
            coverage = step_coverage.index_select(0, back)
        state, prev = out.state.select(back), live_token
    return _hypotheses_of(fin.put(act.ids, act.fin), history, src_lengths, model, cfg, recorded, trees)


def _hypotheses_of(fin: _Finished, history: _History, src_lengths: Tensor, model: SearchModel, cfg: DecodeConfig,
                   recorded: list[TraceStep], trees: list[BeamTree] | None) -> list[list[Hypothesis]]:
    """Each sentence's finished hypotheses, best first, their tokens and attention backtracked
    through the history (and its tree, when asked)."""
    batch = fin.score.size(0)
    fin_step, fin_row = fin.step.reshape(-1), fin.row.reshape(-1)  # (batch * n_best,)
    tokens, attention = _backtrack(fin_step, fin_row, torch.stack(history.tokens), torch.stack(history.back),
                                   torch.stack(history.attention) if history.attention else None, model.eos_id,
                                   model.pad_id)
    hyps = to_hypotheses(tokens, fin_step, fin.score.reshape(-1), fin.log_prob.reshape(-1), attention,
                          src_lengths.repeat_interleave(cfg.n_best))
    if trees is not None:
        trees.extend(build_trees(recorded, batch, cfg.beam_size, model.eos_id, hyps, fin.step.cpu(), fin.row.cpu(),
                                  cfg))
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
    The model's step, the constrained log-probs (step_log_probs), the candidate top-k
    (_select_top) and the penalties are beam_search's own functions, so ties break the same way.

    src (1, src_len), src_lengths (1,); prefix: one row, or None. Returns up to n_best
    hypotheses, best score first. Put the model in eval mode first."""
    cfg = cfg or DecodeConfig()
    beam, eos, device = cfg.beam_size, model.eos_id, src.device
    enc = model.encode(src, src_lengths)
    src_mask, src_len = enc.mask, int(src_lengths[0])
    max_len_t = with_prefix(max_output_lengths(src_lengths, cfg).to(device), prefix)  # (1,) broadcasts over rows
    max_len = int(max_len_t[0])
    bound_lp = np.float32(length_penalty(max_len_t + 1, cfg.length_penalty, cfg.length_norm)[0]) if cfg.length_penalty else None
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
    ended = 0  # hypotheses finished so far, kept or not (stopping "beam")
    tok_hist: list[list[int]] = []  # [t][k]: live beam k's token after step t
    back_hist: list[list[int]] = []  # [t][k]: the row of step t's input it extends
    attn_hist: list[np.ndarray] = []  # [t]: step t's attention, (rows of its input, src_len)
    for t in range(max_len + 1):
        attn = checked_attention(out.attention, cfg)
        logits = out.logits if t else out.logits.expand(beam, -1).contiguous()
        logp = step_log_probs(logits, t, seq, max_len_t, cfg, model, may_be_full=t >= max_len, prefix=row_prefix)
        cand_lp, token, parent = (x[0].tolist() for x in _select_top(cum, logp, beam))  # 2 * beam each
        if not t:
            parent = [0] * len(parent)  # the copies are the first step's one row
        step_coverage = None
        if cfg.coverage_penalty:
            assert attn is not None  # checked_attention refused a model without attention
            step_coverage = attn.float() if coverage is None else coverage + attn.float()  # (rows, src_len)

        finished, ends = _finish_one(finished, cand_lp, token, parent, t, step_coverage, src_mask, cfg, eos)
        ended += ends

        # The beam best others live on (at most beam of the 2 * beam are EOS); -inf ones are dead.
        live = [c for c in range(2 * beam) if token[c] != eos][:beam]
        live_lp = [cand_lp[c] for c in live]
        back = [parent[c] for c in live]
        tok_hist.append([token[c] for c in live])
        back_hist.append(back)
        if attn is not None:
            attn_hist.append(attn.float().numpy())
        if t == max_len or _one_is_done(finished, ended, max(live_lp), bound_lp, cfg):
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


def _finish_one(finished: list[tuple[float, float, int, int]], cand_lp: list[float], token: list[int],
                parent: list[int], t: int, step_coverage: Tensor | None, src_mask: Tensor, cfg: DecodeConfig,
                eos: int) -> tuple[list[tuple[float, float, int, int]], int]:
    """`finished` (score, log_prob, step, parent row), best first, with this step's EOS candidates
    among the top beam added and only the n_best best kept (beam_search's _finish on lists), and how
    many finished at this step."""
    ends = [c for c in range(cfg.beam_size) if token[c] == eos and cand_lp[c] != NEG_INF]
    if not ends:
        return finished, 0
    end_lp = torch.tensor([cand_lp[c] for c in ends], device=src_mask.device)
    rows = torch.tensor([parent[c] for c in ends], device=src_mask.device)
    scores = hypothesis_score(end_lp, torch.full_like(rows, t + 1),
                              None if step_coverage is None else step_coverage.index_select(0, rows),
                              src_mask, cfg).tolist()
    finished = finished + [(score, cand_lp[c], t, parent[c]) for score, c in zip(scores, ends)]
    return sorted(finished, key=lambda f: -f[0])[:cfg.n_best], len(ends)


def _one_is_done(finished: list[tuple[float, float, int, int]], ended: int, best_live: float, bound_lp: Any,
                 cfg: DecodeConfig) -> bool:
    """No live beam left, or with stopping "beam" `ended` >= beam (hypotheses finished so far), or with
    stopping "exact" none that can beat the n_best-th finished hypothesis (as _is_done, in float32 as
    beam_search computes it); `bound_lp`: the length penalty at the longest output, or None."""
    if best_live == NEG_INF:
        return True
    if cfg.stopping == "beam":
        return ended >= cfg.beam_size
    if len(finished) < cfg.n_best:
        return False
    bound = np.float32(best_live) / bound_lp if bound_lp is not None else best_live
    return bool(finished[-1][0] >= bound)


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
