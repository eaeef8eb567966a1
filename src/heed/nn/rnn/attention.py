"""Attention as a differentiable key-value look-up.

    scores  = score(query, keys)                # (batch, tgt_len, src_len)
    weights = masked_softmax(scores, src_mask)  # rows sum to 1 over real tokens, 0 on padding
    context = weights @ values                  # (batch, tgt_len, value_size)

A query is one decoder step `(batch, query_size)` or all steps `(batch, tgt_len, query_size)`; the
result has the same leading shape. Attention keeps no state between calls: the query-independent
half of a learned score (W_a k, W_k k, k/|k|) is computed once per source by `project_keys` and
passed back in as `keys`.

Local attention with predictive alignment (Luong et al. 2015, local-p, eqs. 9-10) is an option on
any score, not a score of its own: with `window=D` each query predicts a source position
p_t = S * sigmoid(v_p . tanh(W_p h_t)) (S = the row's real source length), the score is softmaxed
over the real positions s in [p_t - D, p_t + D] only (the window joins the padding mask in the one
masked_softmax), and the weights are then multiplied by exp(-(s - p_t)^2 / (2 sigma^2)), sigma = D/2.
Positions s are the tensor's indices 0 .. S-1. Local weights are exactly 0 outside the window and
on padding, and (unlike global attention) sum to less than 1.

Coverage (Tu et al. 2016; See et al. 2017, eq. 11) is an option of the additive score: the caller
passes the coverage vector c^t = sum_{t' < t} a^{t'} (batch, [tgt_len,] src_len), how much attention
each source position has had so far, and the score becomes
e_i^t = v . tanh(W_k k_i + W_q q_t + w_c c_i^t + b). The attention keeps no coverage of its own: the
decoder carries it in its state (heed.nn.rnn.coverage).
"""
from __future__ import annotations

import math
from typing import Literal, NamedTuple, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from heed.nn.intervention import active as intervention_active
from heed.nn.intervention import intervene
from heed.nn.masks import masked_softmax
from heed.nn.rnn.config import ScoreName

SCORES: tuple[str, ...] = get_args(ScoreName)
FUSABLE_SCORES = ("dot", "general", "scaled_dot", "cosine")


class Attended(NamedTuple):
    """What one attention call returns."""

    context: Tensor  # (batch, [tgt_len,] value_size)
    weights: Tensor  # (batch, [tgt_len,] src_len)


def _as_steps(query: Tensor) -> tuple[Tensor, bool]:
    """View a one-step query (batch, q) as all-steps (batch, 1, q); say whether we did."""
    if query.dim() == 2:
        return query.unsqueeze(1), True
    if query.dim() == 3:
        return query, False
    raise ValueError(f"query must be (batch, size) or (batch, tgt_len, size), got {tuple(query.shape)}")


def _weigh(scores: Tensor, values: Tensor, mask: Tensor | None, one_step: bool) -> Attended:
    """scores (batch, tgt_len, src_len), values (batch, src_len, v), mask (batch, src_len)."""
    allowed = None if mask is None else mask.unsqueeze(1)
    return _attended(intervene(masked_softmax(scores, allowed), allowed), values, one_step)


def _attended(weights: Tensor, values: Tensor, one_step: bool) -> Attended:
    """weights (batch, tgt_len, src_len), values (batch, src_len, v) -> context and weights, with the
    tgt_len axis dropped again for a one-step query."""
    context = weights @ values  # (batch, tgt_len, v)
    if one_step:
        return Attended(context.squeeze(1), weights.squeeze(1))
    return Attended(context, weights)


def fused_context(
    query: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None, scale: float
) -> Tensor:
    """Context of `softmax(scale * q k^T) v` through torch's fused SDPA kernel (no weights).

    query (batch, [tgt_len,] d), keys (batch, src_len, d), values (batch, src_len, v),
    mask bool (batch, src_len), True = real token. Same numbers as `attend`, including zeros for
    an all-padding row (SDPA itself would give NaN there, so such rows attend to everything and
    are then cleared).
    """
    steps, one_step = _as_steps(query)
    attn_mask = None
    if mask is not None:
        has_real = mask.any(dim=-1, keepdim=True)  # (batch, 1)
        attn_mask = (mask | ~has_real).unsqueeze(1)  # (batch, 1, src_len)
    context = F.scaled_dot_product_attention(steps, keys, values, attn_mask=attn_mask, scale=scale)
    if mask is not None:
        context = context.masked_fill(~has_real.unsqueeze(-1), 0.0)  # (batch, tgt_len, v)
    return context.squeeze(1) if one_step else context


def attend(
    query: Tensor,
    keys: Tensor,
    values: Tensor,
    mask: Tensor | None = None,
    score: Literal["dot", "scaled_dot"] = "dot",
) -> Attended:
    """Attention with a parameter-free score.

    query (batch, [tgt_len,] d), keys (batch, src_len, d), values (batch, src_len, v),
    mask bool (batch, src_len), True = real token.
    """
    if score not in ("dot", "scaled_dot"):
        raise ValueError(f"attend() takes the parameter-free scores dot and scaled_dot; use Attention for {score!r}")
    steps, one_step = _as_steps(query)
    scores = steps @ keys.transpose(1, 2)  # (batch, tgt_len, src_len)
    if score == "scaled_dot":
        scores = scores / math.sqrt(keys.size(-1))  # Vaswani et al. 2017, eq. 1
    return _weigh(scores, values, mask, one_step)


class Attention(nn.Module):
    """Attention with any of the six scores; the learned ones own their parameters.

    - dot:        q . k                              (Luong et al. 2015, eq. 8)
    - general:    q . W_a k                          (Luong et al. 2015, eq. 8)
    - additive:   v_a . tanh(W_q q + W_k k)          (Bahdanau et al. 2015, A.1.2)
    - scaled_dot: q . k / sqrt(d)                    (Vaswani et al. 2017)
    - cosine:     g * cos(q, k), g learned           (Luong's cosine idea with a learned temperature)
    - location:   (W_a q)_s, one score per source position s, whatever the keys
                                                     (Luong et al. 2015, eq. 8, location)

    `max_positions` (location only): the positions W_a scores, the longest source it can attend over;
    a longer source's positions past it get weight 0 (there is no row of W_a for them).
    `window` (any score): D of Luong's local-p attention (module doc); None = global attention.
    `coverage` (additive only): the score takes the coverage vector (module doc) as `forward`'s
    `coverage` argument, through a learned w_c (See et al. 2017, eq. 11).
    """

    def __init__(
        self,
        score: ScoreName,
        *,
        query_size: int,
        key_size: int,
        hidden_size: int | None = None,
        cosine_scale: float = 10.0,
        max_positions: int | None = None,
        window: int | None = None,
        coverage: bool = False,
    ) -> None:
        super().__init__()
        if score not in SCORES:
            raise ValueError(f"unknown attention score {score!r}; choose one of {', '.join(SCORES)}")
        if score in ("dot", "scaled_dot", "cosine") and query_size != key_size:
            raise ValueError(f"{score} attention needs query_size == key_size, got {query_size} and {key_size}")
        if (score == "location") != (max_positions is not None):
            raise ValueError("max_positions (the source positions W_a scores) is given with the location score "
                             f"and only with it; got score {score!r} and max_positions {max_positions}")
        if max_positions is not None and max_positions < 1:
            raise ValueError(f"max_positions must be at least 1, got {max_positions}")
        if window is not None and window < 1:
            raise ValueError(f"window (local-p's D) must be at least 1, got {window}")
        if coverage and score != "additive":
            raise ValueError(f"coverage feeds the additive score (See et al. 2017, eq. 11); got score {score!r}")
        self.score = score
        self.query_size = query_size
        self.key_size = key_size
        self.max_positions = max_positions
        self.window = window
        self.coverage = coverage
        if window is not None:  # Luong et al. 2015, eq. 9: p_t = S * sigmoid(v_p . tanh(W_p h_t))
            self.position_proj = nn.Linear(query_size, query_size, bias=False)  # W_p
            self.position_v = nn.Linear(query_size, 1, bias=False)  # v_p
        if max_positions is not None:  # the location score
            self.location_proj = nn.Linear(query_size, max_positions, bias=False)  # W_a: h_t -> a score per position
        if score == "general":
            self.key_proj = nn.Linear(key_size, query_size, bias=False)  # W_a: key space -> query space
        elif score == "additive":
            hidden_size = hidden_size or query_size
            self.key_proj = nn.Linear(key_size, hidden_size, bias=False)  # W_k
            self.query_proj = nn.Linear(query_size, hidden_size, bias=True)  # W_q (+ bias)
            self.v = nn.Linear(hidden_size, 1, bias=False)  # v_a
            if coverage:
                self.coverage_proj = nn.Linear(1, hidden_size, bias=False)  # w_c (See et al. 2017, eq. 11)
        elif score == "cosine":
            self.scale = nn.Parameter(torch.tensor(float(cosine_scale)))

    @property
    def fusable(self) -> bool:
        """Whether `context` can use the fused SDPA kernel for this score."""
        return self.score in FUSABLE_SCORES and self.window is None and not self.coverage

    def project_keys(self, keys: Tensor) -> Tensor:
        """The query-independent part of the score, once per source.

        keys (batch, src_len, key_size) -> (batch, src_len, size), size = query_size for general,
        the attention hidden size for additive, key_size otherwise (location ignores its keys).
        """
        if self.score in ("general", "additive"):
            return self.key_proj(keys)
        if self.score == "cosine":
            return F.normalize(keys, dim=-1)
        return keys

    def scores(self, query: Tensor, keys: Tensor, coverage: Tensor | None = None) -> Tensor:
        """query (batch, tgt_len, query_size), projected keys (batch, src_len, ·), coverage
        (batch, tgt_len, src_len) for a coverage score -> (batch, tgt_len, src_len)."""
        if self.score == "location":
            return self._location_scores(query, keys.size(1))
        if self.score == "additive":
            q = self.query_proj(query).unsqueeze(2)  # (batch, tgt_len, 1, hidden)
            hidden = q + keys.unsqueeze(1)  # (batch, tgt_len, src_len, hidden)
            if coverage is not None:  # See et al. 2017, eq. 11: + w_c c_i^t
                w_c = self.coverage_proj.weight.squeeze(-1)  # (hidden,)
                hidden = hidden + coverage.unsqueeze(-1).to(hidden.dtype) * w_c.to(hidden.dtype)
            return self.v(torch.tanh(hidden)).squeeze(-1)  # (batch, tgt_len, src_len)
        if self.score == "cosine":
            query = self.scale * F.normalize(query, dim=-1)
        scores = query @ keys.transpose(1, 2)  # (batch, tgt_len, src_len)
        if self.score == "scaled_dot":
            scores = scores / math.sqrt(keys.size(-1))
        return scores

    def _location_scores(self, query: Tensor, src_len: int) -> Tensor:
        """Luong et al. 2015, eq. 8 (location): a_t = softmax(W_a h_t), scores for positions 0 .. src_len-1.
        query (batch, tgt_len, query_size) -> (batch, tgt_len, src_len); positions past max_positions
        score 0 here and are masked out by `_mask`."""
        scores = self.location_proj(query)  # (batch, tgt_len, max_positions)
        known = scores.size(-1)  # max_positions
        if src_len <= known:
            return scores[..., :src_len]  # padding past the real length is masked by masked_softmax
        return F.pad(scores, (0, src_len - known))  # (batch, tgt_len, src_len)

    def predict_position(self, query: Tensor, mask: Tensor | None, src_len: int) -> Tensor:
        """Luong et al. 2015, eq. 9: p_t = S * sigmoid(v_p . tanh(W_p h_t)), S the row's real source
        length, so p_t lies in [0, S]. query (batch, tgt_len, query_size) -> p_t (batch, tgt_len),
        in float32 (float64 for a float64 query): fp16/bf16 cannot place a position past 256 to the unit."""
        dtype = torch.promote_types(query.dtype, torch.float32)
        if mask is None:
            length = query.new_full((query.size(0), 1), src_len, dtype=dtype)  # (batch, 1)
        else:
            length = mask.sum(dim=-1, keepdim=True).to(dtype)  # S: (batch, 1)
        gate = torch.sigmoid(self.position_v(torch.tanh(self.position_proj(query))).squeeze(-1))  # (batch, tgt_len)
        return length * gate.to(dtype)

    def _mask(self, query: Tensor, src_len: int, mask: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
        """The one mask masked_softmax applies, bool (batch, 1 or tgt_len, src_len), True = may attend:
        real tokens, within max_positions (location), inside [p_t - D, p_t + D] (local-p); and local-p's
        Gaussian exp(-(s - p_t)^2 / (2 sigma^2)) (batch, tgt_len, src_len) in p_t's dtype, else None.
        query (batch, tgt_len, query_size), mask bool (batch, src_len)."""
        allowed = None if mask is None else mask.unsqueeze(1)  # (batch, 1, src_len)
        if self.max_positions is not None and src_len > self.max_positions:  # the location score
            known = torch.arange(src_len, device=query.device) < self.max_positions  # (src_len,)
            allowed = known.expand(query.size(0), 1, src_len) if allowed is None else allowed & known
        if self.window is None:
            return allowed, None
        p_t = self.predict_position(query, mask, src_len).unsqueeze(-1)  # (batch, tgt_len, 1)
        s = torch.arange(src_len, device=query.device, dtype=p_t.dtype)  # (src_len,) positions 0 .. src_len-1
        offset = s - p_t  # (batch, tgt_len, src_len)
        in_window = offset.abs() <= self.window  # Luong et al. 2015, §3.2: the window [p_t - D, p_t + D]
        allowed = in_window if allowed is None else allowed & in_window
        sigma = self.window / 2  # Luong et al. 2015, §3.2: sigma = D/2, set empirically
        gaussian = torch.exp(-offset.square() / (2 * sigma ** 2))  # Luong et al. 2015, eq. 10
        return allowed, gaussian

    def forward(self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None = None, *,
                coverage: Tensor | None = None) -> Attended:
        """query (batch, [tgt_len,] query_size); keys = project_keys(states) (batch, src_len, ·);
        values (batch, src_len, value_size); mask bool (batch, src_len), True = real token;
        coverage (batch, [tgt_len,] src_len), the attention so far, for a coverage score only."""
        if self.coverage != (coverage is not None):
            raise ValueError("a coverage score takes the coverage vector, and only a coverage score does; "
                             f"this one has coverage={self.coverage}")
        steps, one_step = _as_steps(query)
        if coverage is not None and one_step:
            coverage = coverage.unsqueeze(1)  # (batch, 1, src_len)
        if self.score != "location" and self.window is None:
            return _weigh(self.scores(steps, keys, coverage), values, mask, one_step)
        allowed, gaussian = self._mask(steps, keys.size(1), mask)
        weights = masked_softmax(self.scores(steps, keys, coverage), allowed)  # (batch, tgt_len, src_len)
        if gaussian is not None:
            # Luong et al. 2015, eq. 10: a_t(s) = align(h_t, h_s) exp(-(s - p_t)^2 / (2 sigma^2))
            weights = weights * gaussian.to(weights.dtype)
        return _attended(intervene(weights, allowed), values, one_step)

    def context(self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None = None, *,
                fused: bool | None = None, coverage: Tensor | None = None) -> Tensor:
        """Only the context (batch, [tgt_len,] value_size), without materialising the weights.

        `fused=None` takes torch's fused SDPA kernel on CUDA and the explicit path elsewhere: on CPU
        the kernel measured 0.6-0.85x the speed of the explicit path at NMT sizes
        (bench/attention_fused.py). Both give the same numbers (tests/nn/test_attention.py).
        """
        if fused is None:
            fused = query.is_cuda
        if not (fused and self.fusable) or intervention_active():
            return self.forward(query, keys, values, mask, coverage=coverage).context
        scale = 1.0 / math.sqrt(keys.size(-1)) if self.score == "scaled_dot" else 1.0
        if self.score == "cosine":
            query = self.scale * F.normalize(query, dim=-1)
        return fused_context(query, keys, values, mask, scale)
