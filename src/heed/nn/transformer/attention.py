"""Multi-head attention (Vaswani et al. 2017, 3.2.2) on heed's scaled-dot score and its one masked
softmax:

    head_i  = masked_softmax(Q W_q^i (K W_k^i)^T / sqrt(d_k), mask) V W_v^i      # eq. 1
    output  = Concat(head_1, ..., head_h) W_o

Shapes: `batch, heads, q_len, k_len, d_model`, and d_k = d_model / heads. A projected query, key or
value is (batch, heads, len, d_k).

Weights in nn.MultiheadAttention's layout, so they copy across (and into the NumPy twin,
heed.scratch.transformer) without permutation: `in_proj_weight` (3 d_model, d_model) is W_q, W_k,
W_v stacked, `in_proj_bias` (3 d_model,), `out_proj` a Linear(d_model, d_model).

Mask polarity as everywhere in heed: bool, True = may attend, broadcastable to
(batch, heads, q_len, k_len). A query row with no key it may attend to gets all-zero weights and a
zero context (never NaN, as nn.MultiheadAttention gives).

Two paths, the same numbers (tests/nn/transformer/test_attention.py): `attend` with
`need_weights=True` computes the scores and the masked softmax itself and returns every head's
weights; without weights it runs torch's fused `scaled_dot_product_attention` (the training path,
which never materialises the (batch, heads, q_len, k_len) weights where a fused kernel exists).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from heed.nn.int8 import Int8Linear
from heed.nn.intervention import active as intervention_active
from heed.nn.intervention import intervene
from heed.nn.masks import masked_softmax


class HeadsAttended(NamedTuple):
    context: Tensor  # (batch, q_len, d_model), after W_o
    weights: Tensor | None  # (batch, heads, q_len, k_len) every head's weights; None when not asked for


class Int8Projections(nn.Module):
    """`in_proj_weight`'s three products in int8 (heed.nn.int8), each slice packed once: the query's
    rows (W_q), the memory's (W_k, W_v) and all three (self-attention's one product)."""

    def __init__(self, weight: Tensor, bias: Tensor, *, reduce_range: bool) -> None:
        super().__init__()
        d = weight.size(1)
        self.query = Int8Linear(weight[:d], bias[:d], reduce_range=reduce_range)
        self.memory = Int8Linear(weight[d:], bias[d:], reduce_range=reduce_range)
        self.all = Int8Linear(weight, bias, reduce_range=reduce_range)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, *, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by heads {heads}")
        self.d_model, self.heads, self.d_k = d_model, heads, d_model // heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * d_model, d_model))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * d_model))
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = dropout  # on the attention weights, in training (Vaswani et al. 2017 apply it to the sums)
        nn.init.xavier_uniform_(self.in_proj_weight)  # as nn.MultiheadAttention
        nn.init.zeros_(self.out_proj.bias)
        # Set by to_int8: the projections' int8 products; None, the float ones (F.linear below).
        self.int8: Int8Projections | None = None

    def to_int8(self, *, reduce_range: bool) -> None:
        """Run the projections' products in int8 from now on (heed.nn.int8): W_q, W_k W_v and
        W_q W_k W_v packed, and out_proj an Int8Linear. For decoding; the float weights stay, unused
        by the products."""
        self.int8 = Int8Projections(self.in_proj_weight, self.in_proj_bias, reduce_range=reduce_range)
        assert isinstance(self.out_proj, nn.Linear), "to_int8 runs once"
        self.out_proj = Int8Linear.of(self.out_proj, reduce_range=reduce_range)  # type: ignore[assignment]

    def _split(self, x: Tensor) -> Tensor:
        """(batch, len, d_model) -> (batch, heads, len, d_k)."""
        return x.unflatten(-1, (self.heads, self.d_k)).transpose(1, 2)

    def project_query(self, x: Tensor) -> Tensor:
        """x (batch, q_len, d_model) -> Q W_q (batch, heads, q_len, d_k)."""
        if self.int8 is not None:
            return self._split(self.int8.query(x))
        d = self.d_model
        return self._split(F.linear(x, self.in_proj_weight[:d], self.in_proj_bias[:d]))

    def project_memory(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (batch, k_len, d_model) -> K W_k, V W_v, each (batch, heads, k_len, d_k): the
        cross-attention's keys and values, once per source."""
        if self.int8 is not None:
            k, v = self.int8.memory(x).chunk(2, dim=-1)
            return self._split(k), self._split(v)
        d = self.d_model
        k, v = F.linear(x, self.in_proj_weight[d:], self.in_proj_bias[d:]).chunk(2, dim=-1)
        return self._split(k), self._split(v)

    def project_all(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention's three projections in one product: x (batch, len, d_model) -> q, k, v,
        each (batch, heads, len, d_k)."""
        if self.int8 is not None:
            q, k, v = self.int8.all(x).chunk(3, dim=-1)
        else:
            q, k, v = F.linear(x, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)
        return self._split(q), self._split(k), self._split(v)

    def head_outputs(self, v: Tensor) -> Tensor:
        """v (batch, heads, k_len, d_k) -> (batch, heads, k_len, d_model): what each head's value
        vectors add to the output, f_h(x_j) = v_j^h W_o^h, the head's slice of W_o (the output is
        sum_h sum_j weight_ij^h f_h(x_j) + b_o). Kobayashi et al. 2020 weigh attention by its norm."""
        w_o = self.out_proj.weight.view(self.d_model, self.heads, self.d_k).permute(1, 2, 0)  # (heads, d_k, d_model)
        return torch.einsum("bhjk,hkd->bhjd", v, w_o)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
               causal: bool = False, need_weights: bool = False, over_source: bool = False) -> HeadsAttended:
        """q (batch, heads, q_len, d_k), k and v (batch, heads, k_len, d_k), mask bool broadcastable
        to (batch, heads, q_len, k_len), True = may attend; `causal`: query i sees keys <= i too
        (q_len == k_len); `over_source`: the cross-attention, which an active attention intervention
        (heed.nn.intervention) changes. -> context (batch, q_len, d_model) after W_o, and with
        `need_weights` every head's weights (batch, heads, q_len, k_len)."""
        if causal:
            q_len, k_len = q.size(-2), k.size(-2)
            below = torch.ones(q_len, k_len, dtype=torch.bool, device=q.device).tril()  # (q_len, k_len)
            mask = below if mask is None else mask & below
        dropout = self.dropout if self.training else 0.0
        intervened = over_source and intervention_active()
        weights: Tensor | None
        if need_weights or intervened:
            read = masked_softmax(q @ k.transpose(-1, -2) / math.sqrt(self.d_k), mask)  # eq. 1
            if intervened:
                read = intervene(read, mask)
            context = F.dropout(read, dropout, self.training) @ v  # (batch, heads, q_len, d_k)
            weights = read if need_weights else None
        else:
            weights = None
            context = fused_heads(q, k, v, mask, dropout)
        return HeadsAttended(self.out_proj(context.transpose(1, 2).flatten(2)), weights)


try:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    # Every backend but cuDNN's: cuDNN builds a graph for each new shape (several hundred ms on an
    # H100, measured: bench/RESULTS.md), and token-bucketed batches bring new shapes all the time.
    _SHAPE_FREE_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
except ImportError:  # torch < 2.3: no cuDNN backend to avoid
    sdpa_kernel = None  # type: ignore[assignment]  # the older torch's missing function


def sdpa_backends(q: Tensor) -> list[SDPBackend] | None:
    """The SDPA backends heed allows for `q`'s device: on CUDA all but cuDNN's; None = torch's choice."""
    return _SHAPE_FREE_BACKENDS if q.is_cuda and sdpa_kernel is not None else None


def _sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: float) -> Tensor:
    backends = sdpa_backends(q)
    if backends is not None:
        with sdpa_kernel(backends):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)


def fused_heads(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: float = 0.0) -> Tensor:
    """softmax(q k^T / sqrt(d_k), mask) v through torch's fused kernel: the same numbers as the
    masked softmax, an all-masked query row included (SDPA alone gives NaN there: such rows attend to
    everything and are then cleared). q (batch, heads, q_len, d_k) -> (batch, heads, q_len, d_k).
    On CUDA, never cuDNN's kernel (it pays a graph build for every new shape)."""
    if mask is None:
        return _sdpa(q, k, v, None, dropout)
    has_key = mask.any(dim=-1, keepdim=True)  # (.., q_len, 1)
    context = _sdpa(q, k, v, mask | ~has_key, dropout)
    return context.masked_fill(~has_key, 0.0)
