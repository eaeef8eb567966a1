"""The Transformer's layers (Vaswani et al. 2017, 3.1-3.5): positions, the position-wise feed-forward
network, and encoder and decoder layers, pre-norm (Wang et al. 2019; the default: it trains without a
long warm-up) or post-norm (the original paper's, LayerNorm(x + Sublayer(x))).

Shapes: `batch, src_len, tgt_len, d_model, heads, d_k`; in a decoding step `rows = batch * group`
decoder rows (a source's beams are consecutive) and q_len = 1.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from heed.nn.protocol import AttentionBlock
from heed.nn.transformer.attention import MultiHeadAttention

Visit = Callable[[AttentionBlock], None]  # what an attention block is shown to (heed.nn.protocol.ContributionModel)

NormPlace = Literal["pre", "post"]
PositionKind = Literal["sinusoidal", "learned"]
SinusoidLayout = Literal["interleaved", "halves", "fairseq"]
FAIRSEQ_FIRST_POSITION = 2  # fairseq counts positions from its padding index (1) + 1
Activation = Literal["relu", "gelu", "gelu_tanh", "swish"]

ACTIVATIONS = {
    "relu": torch.relu,
    "gelu": F.gelu,  # the exact one, erf (Hendrycks & Gimpel 2016)
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "swish": F.silu,  # x sigmoid(x) (Ramachandran et al. 2017): Marian's "swish", OPUS-MT's
}


class SinusoidalPositions(nn.Module):
    """PE(pos, 2i) = sin(pos / 10000^(2i / d)), PE(pos, 2i + 1) = cos(pos / 10000^(2i / d))
    (Vaswani et al. 2017, 3.5), computed for the positions asked: no table, no longest length.
    `layout` "halves" puts the same values as all sines, then all cosines (Marian's layout:
    PE(pos, i) = sin, PE(pos, d/2 + i) = cos). "fairseq" is tensor2tensor's as fairseq and M2M-100
    /NLLB have it: halves, frequencies 10000^(-i / (d/2 - 1)), and the first token at position 2
    (after fairseq's padding index, 1)."""

    inverse_frequency: Tensor  # a buffer: (d_model / 2,)

    def __init__(self, d_model: int, layout: SinusoidLayout = "interleaved") -> None:
        super().__init__()
        if d_model % 2 or (layout == "fairseq" and d_model < 4):
            raise ValueError(f"sinusoidal positions need an even d_model (4 or more for fairseq's), not {d_model}")
        half = d_model // 2
        if layout == "fairseq":  # in float32, as fairseq computes it: the same numbers to the last bit
            inverse = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / (half - 1)))
        else:
            inverse = torch.exp(torch.arange(half, dtype=torch.float64) * -(math.log(10000.0) / half)).float()
        self.register_buffer("inverse_frequency", inverse, persistent=False)  # (d_model / 2,)
        self.halves = layout != "interleaved"
        self.first = FAIRSEQ_FIRST_POSITION if layout == "fairseq" else 0

    def forward(self, positions: Tensor) -> Tensor:
        """positions (...) long, 0 = the first token -> (..., d_model) float32."""
        angles = (positions + self.first).unsqueeze(-1).float() * self.inverse_frequency  # (..., d_model / 2)
        if self.halves:
            return torch.cat([angles.sin(), angles.cos()], dim=-1)
        return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # sin, cos interleaved


class LearnedPositions(nn.Module):
    """A learned vector per position (Gehring et al. 2017), `max_positions` of them; a position past
    the table reads its last row (a decode that long has left anything the model was trained on)."""

    def __init__(self, d_model: int, max_positions: int) -> None:
        super().__init__()
        self.table = nn.Embedding(max_positions, d_model)
        nn.init.normal_(self.table.weight, std=d_model ** -0.5)

    def forward(self, positions: Tensor) -> Tensor:
        """positions (...) long -> (..., d_model)."""
        return self.table(positions.clamp(max=self.table.num_embeddings - 1))


def make_positions(kind: PositionKind, d_model: int, max_positions: int,
                   layout: SinusoidLayout = "interleaved") -> nn.Module:
    return SinusoidalPositions(d_model, layout) if kind == "sinusoidal" else LearnedPositions(d_model, max_positions)


class FeedForward(nn.Module):
    """FFN(x) = act(x W_1 + b_1) W_2 + b_2, act = max(0, .) in Vaswani et al. 2017, eq. 2:
    (..., d_model) -> (..., d_model)."""

    def __init__(self, d_model: int, ff_size: int, dropout: float, activation: Activation = "relu") -> None:
        super().__init__()
        self.inner = nn.Linear(d_model, ff_size)
        self.outer = nn.Linear(ff_size, d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = activation
        self._act = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.outer(self.dropout(self._act(self.inner(x))))


class _Residual(nn.Module):
    """What both layers share: a sublayer with dropout on its output, a residual connection and
    layer normalisation, before the sublayer (pre) or after the sum (post). Each layer makes its
    feed-forward network last (its parameters initialise after the attention's)."""

    feed_forward: FeedForward
    feed_forward_norm: nn.LayerNorm

    def __init__(self, norm: NormPlace, dropout: float) -> None:
        super().__init__()
        self.pre = norm == "pre"
        self.dropout = nn.Dropout(dropout)

    def _input(self, x: Tensor, norm: nn.LayerNorm) -> Tensor:
        """What a sublayer reads: norm(x) before it (pre), x itself (post)."""
        return norm(x) if self.pre else x

    def _output(self, x: Tensor, sublayer_out: Tensor, norm: nn.LayerNorm) -> Tensor:
        """The residual sum: x + Dropout(Sublayer), normalised after the sum for post-norm
        (Vaswani et al. 2017, 5.4: LayerNorm(x + Sublayer(x)))."""
        x = x + self.dropout(sublayer_out)
        return x if self.pre else norm(x)

    def _feed_forward(self, x: Tensor) -> Tensor:
        return self._output(x, self.feed_forward(self._input(x, self.feed_forward_norm)), self.feed_forward_norm)

    def _block(self, part: str, attention: MultiHeadAttention, norm: nn.LayerNorm, weights: Tensor | None,
               values: Tensor, residual: Tensor, output: Tensor) -> AttentionBlock:
        """The sublayer as the terms its output sums (heed.nn.protocol.AttentionBlock); values
        (batch, heads, k_len, d_k) as projected, weights (batch, heads, q_len, k_len). The layer
        index is the stack's to fill in."""
        assert weights is not None
        return AttentionBlock(part, 0, weights, attention.head_outputs(values), attention.out_proj.bias, residual,
                              None if self.pre else norm, output)


class EncoderLayerOutput(NamedTuple):
    states: Tensor  # (batch, src_len, d_model)
    weights: Tensor | None  # (batch, heads, src_len, src_len) when asked for


class EncoderLayer(_Residual):
    """Self-attention over the source, then the feed-forward network."""

    def __init__(self, d_model: int, heads: int, ff_size: int, *, dropout: float, attention_dropout: float,
                 norm: NormPlace, activation: Activation = "relu") -> None:
        super().__init__(norm, dropout)
        self.self_attn = MultiHeadAttention(d_model, heads, dropout=attention_dropout)
        self.self_attn_norm = nn.LayerNorm(d_model)
        self.feed_forward = FeedForward(d_model, ff_size, dropout, activation)
        self.feed_forward_norm = nn.LayerNorm(d_model)

    def forward(self, x: Tensor, mask: Tensor, *, need_weights: bool = False,
                visit: Visit | None = None) -> EncoderLayerOutput:
        """x (batch, src_len, d_model), mask bool (batch, 1, 1, src_len), True = real token; `visit`
        is shown the self-attention as an AttentionBlock."""
        q, k, v = self.self_attn.project_all(self._input(x, self.self_attn_norm))
        attended = self.self_attn.attend(q, k, v, mask, need_weights=need_weights or visit is not None)
        out = self._output(x, attended.context, self.self_attn_norm)
        if visit is not None:
            visit(self._block("encoder", self.self_attn, self.self_attn_norm, attended.weights, v, x, out))
        return EncoderLayerOutput(self._feed_forward(out), attended.weights if need_weights else None)


class DecoderLayerOutput(NamedTuple):
    states: Tensor  # (rows, q_len, d_model)
    cache: tuple[Tensor, Tensor]  # self-attention keys and values so far, each (rows, heads, steps, d_k)
    self_weights: Tensor | None  # (rows, heads, q_len, steps) when asked for
    cross_weights: Tensor | None  # (rows, heads, q_len, src_len) when asked for


class DecoderLayer(_Residual):
    """Masked self-attention over the target so far, attention over the source, then the
    feed-forward network."""

    def __init__(self, d_model: int, heads: int, ff_size: int, *, dropout: float, attention_dropout: float,
                 norm: NormPlace, activation: Activation = "relu") -> None:
        super().__init__(norm, dropout)
        self.self_attn = MultiHeadAttention(d_model, heads, dropout=attention_dropout)
        self.self_attn_norm = nn.LayerNorm(d_model)
        self.cross_attn = MultiHeadAttention(d_model, heads, dropout=attention_dropout)
        self.cross_attn_norm = nn.LayerNorm(d_model)
        self.feed_forward = FeedForward(d_model, ff_size, dropout, activation)
        self.feed_forward_norm = nn.LayerNorm(d_model)

    def forward(self, x: Tensor, memory: tuple[Tensor, Tensor], memory_mask: Tensor, *,
                cache: tuple[Tensor, Tensor] | None = None, need_weights: bool = False,
                visit: Visit | None = None) -> DecoderLayerOutput:
        """x (rows, q_len, d_model); memory: the cross-attention's keys and values, each
        (batch, heads, src_len, d_k), one copy per source, for rows = batch * group decoder rows;
        memory_mask bool (batch, 1, 1, src_len). Without `cache` the q_len positions are a whole
        target, each seeing itself and those before it (teacher forcing); with the cache (each
        (rows, heads, steps, d_k), the keys and values of the steps before) they follow it. `visit`
        (teacher forcing, group 1) is shown the self-attention and then the cross-attention as
        AttentionBlocks."""
        weighed = need_weights or visit is not None
        q, k, v = self.self_attn.project_all(self._input(x, self.self_attn_norm))
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)  # (rows, heads, steps, d_k)
        attended = self.self_attn.attend(q, k, v, causal=cache is None, need_weights=weighed)
        mid = self._output(x, attended.context, self.self_attn_norm)
        query = self.cross_attn.project_query(self._input(mid, self.cross_attn_norm))
        context, cross_weights = grouped_attend(self.cross_attn, query, memory, memory_mask, need_weights=weighed)
        out = self._output(mid, context, self.cross_attn_norm)
        if visit is not None:
            visit(self._block("decoder", self.self_attn, self.self_attn_norm, attended.weights, v, x, mid))
            visit(self._block("cross", self.cross_attn, self.cross_attn_norm, cross_weights, memory[1], mid, out))
        if not need_weights:
            return DecoderLayerOutput(self._feed_forward(out), (k, v), None, None)
        return DecoderLayerOutput(self._feed_forward(out), (k, v), attended.weights, cross_weights)


def grouped_attend(attention: MultiHeadAttention, q: Tensor, memory: tuple[Tensor, Tensor], mask: Tensor, *,
                   need_weights: bool) -> tuple[Tensor, Tensor | None]:
    """Attention of rows = batch * group queries over their batch sources' keys and values, each
    source read once for all its rows (its beams), never copied per row.

    q (rows, heads, q_len, d_k), memory each (batch, heads, src_len, d_k), mask (batch, 1, 1, src_len)
    -> context (rows, q_len, d_model), weights (rows, heads, q_len, src_len) or None."""
    keys, values = memory
    batch, heads, q_len, d_k = keys.size(0), q.size(1), q.size(2), q.size(3)
    src_len = keys.size(2)
    # Sizes only through reshape's -1: the exported step graph then serves any group (a traced
    # `rows // batch` would be frozen at the example's value).
    grouped = q.size(0) != batch
    if grouped:  # (rows, heads, q_len, d_k) -> (batch, heads, group * q_len, d_k)
        q = q.reshape(batch, -1, heads, q_len, d_k).transpose(1, 2).reshape(batch, heads, -1, d_k)
    out = attention.attend(q, keys, values, mask, need_weights=need_weights, over_source=True)
    context = out.context.reshape(-1, q_len, out.context.size(-1))  # (rows, q_len, d_model)
    weights = out.weights
    if weights is not None and grouped:  # (batch, heads, group * q_len, src_len) -> (rows, heads, q_len, src_len)
        weights = weights.reshape(batch, heads, -1, q_len, src_len).transpose(1, 2).reshape(-1, heads, q_len, src_len)
    return context, weights
