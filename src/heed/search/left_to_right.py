"""Greedy search and sampling: one token a step per sentence, left to right."""
from __future__ import annotations

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
    max_output_lengths,
    step_log_probs,
    to_hypotheses,
    with_prefix,
)


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
    max_len = with_prefix(max_output_lengths(src_lengths, cfg).to(device), prefix)  # (batch,)
    shortest, longest = extremes(max_len)
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
        attn = checked_attention(out.attention, cfg)
        logp = step_log_probs(out.logits, t, seq, act_max_len, cfg, model,
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
        tokens.append(all_rows(token, active, batch, model.pad_id))
        if attn is not None:
            attn = all_rows(attn.float(), active, batch)  # (batch, src_len), zero for the sentences already done
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
    return to_hypotheses(token_rows, lengths, scores, log_prob, attn_rows, src_lengths)
