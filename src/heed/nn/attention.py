"""Attention as a differentiable key-value look-up.

    scores  = score(query, keys)                # (batch, tgt_len, src_len)
    weights = masked_softmax(scores, src_mask)  # rows sum to 1 over real tokens, 0 on padding
    context = weights @ values                  # (batch, tgt_len, value_size)

A query is one decoder step `(batch, query_size)` or all steps `(batch, tgt_len, query_size)`; the
result has the same leading shape. Attention keeps no state between calls: the query-independent
half of a learned score (W_a k, W_k k, k/|k|) is computed once per source by `project_keys` and
passed back in as `keys`.
"""
from __future__ import annotations

import math
from typing import Literal, NamedTuple, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from heed.nn.masks import masked_softmax

ScoreName = Literal["dot", "general", "additive", "scaled_dot", "cosine"]
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
    weights = masked_softmax(scores, None if mask is None else mask.unsqueeze(1))
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
    """Attention with any of the five scores; the learned ones own their parameters.

    - dot:        q . k                              (Luong et al. 2015, eq. 8)
    - general:    q . W_a k                          (Luong et al. 2015, eq. 8)
    - additive:   v_a . tanh(W_q q + W_k k)          (Bahdanau et al. 2015, A.1.2)
    - scaled_dot: q . k / sqrt(d)                    (Vaswani et al. 2017)
    - cosine:     g * cos(q, k), g learned           (Luong's cosine idea with a learned temperature)
    """

    def __init__(
        self,
        score: ScoreName,
        *,
        query_size: int,
        key_size: int,
        hidden_size: int | None = None,
        cosine_scale: float = 10.0,
    ) -> None:
        super().__init__()
        if score not in SCORES:
            raise ValueError(f"unknown attention score {score!r}; choose one of {', '.join(SCORES)}")
        if score in ("dot", "scaled_dot", "cosine") and query_size != key_size:
            raise ValueError(f"{score} attention needs query_size == key_size, got {query_size} and {key_size}")
        self.score = score
        self.query_size = query_size
        self.key_size = key_size
        if score == "general":
            self.key_proj = nn.Linear(key_size, query_size, bias=False)  # W_a: key space -> query space
        elif score == "additive":
            hidden_size = hidden_size or query_size
            self.key_proj = nn.Linear(key_size, hidden_size, bias=False)  # W_k
            self.query_proj = nn.Linear(query_size, hidden_size, bias=True)  # W_q (+ bias)
            self.v = nn.Linear(hidden_size, 1, bias=False)  # v_a
        elif score == "cosine":
            self.scale = nn.Parameter(torch.tensor(float(cosine_scale)))

    @property
    def fusable(self) -> bool:
        """Whether `context` can use the fused SDPA kernel for this score."""
        return self.score in FUSABLE_SCORES

    def project_keys(self, keys: Tensor) -> Tensor:
        """The query-independent part of the score, once per source.

        keys (batch, src_len, key_size) -> (batch, src_len, size), size = query_size for general,
        the attention hidden size for additive, key_size otherwise.
        """
        if self.score in ("general", "additive"):
            return self.key_proj(keys)
        if self.score == "cosine":
            return F.normalize(keys, dim=-1)
        return keys

    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        """query (batch, tgt_len, query_size), projected keys (batch, src_len, ·) -> (batch, tgt_len, src_len)."""
        if self.score == "additive":
            q = self.query_proj(query).unsqueeze(2)  # (batch, tgt_len, 1, hidden)
            return self.v(torch.tanh(q + keys.unsqueeze(1))).squeeze(-1)  # (batch, tgt_len, src_len)
        if self.score == "cosine":
            query = self.scale * F.normalize(query, dim=-1)
        scores = query @ keys.transpose(1, 2)  # (batch, tgt_len, src_len)
        if self.score == "scaled_dot":
            scores = scores / math.sqrt(keys.size(-1))
        return scores

    def forward(self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None = None) -> Attended:
        """query (batch, [tgt_len,] query_size); keys = project_keys(states) (batch, src_len, ·);
        values (batch, src_len, value_size); mask bool (batch, src_len), True = real token."""
        steps, one_step = _as_steps(query)
        return _weigh(self.scores(steps, keys), values, mask, one_step)

    def context(self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None = None, *,
                fused: bool | None = None) -> Tensor:
        """Only the context (batch, [tgt_len,] value_size), without materialising the weights.

        `fused=None` takes torch's fused SDPA kernel on CUDA and the explicit path elsewhere: on CPU
        the kernel measured 0.6-0.85x the speed of the explicit path at NMT sizes
        (bench/attention_fused.py). Both give the same numbers (tests/nn/test_attention.py).
        """
        if fused is None:
            fused = query.is_cuda
        if not (fused and self.fusable):
            return self.forward(query, keys, values, mask).context
        scale = 1.0 / math.sqrt(keys.size(-1)) if self.score == "scaled_dot" else 1.0
        if self.score == "cosine":
            query = self.scale * F.normalize(query, dim=-1)
        return fused_context(query, keys, values, mask, scale)
