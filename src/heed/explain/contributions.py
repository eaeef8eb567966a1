"""What each input token adds to each prediction of a Transformer, read through every layer: attention
rollout and ALTI+, and each prediction's source share against its target-prefix share.

Every attention block mixes the streams of its positions (heed.nn.protocol.AttentionBlock). A block's
mixing says, for query position i, how much of its output comes from each key j and from its own
stream (the residual); each row sums to 1. Two ways to measure it:

    rollout  (Abnar & Zuidema 2020) half the heads' mean attention, half the residual:
             keys = 0.5 mean_h weights[h, i, j], own = 0.5
    ALTI     (Ferrando et al. 2022a, "Measuring the mixing of contextual information in the
             Transformer") the block's output y_i is a sum of one vector per input,
             T_i(x_j) = sum_h weights[h, i, j] f_h(x_j), a self-attention's residual x_i joining its
             own position's term, a cross-attention's residual a term of its own; post-norm's
             LayerNorm is linear once the sum's standard deviation is fixed, so it is applied to
             each term. Then c_ij = max(0, ||y_i||_1 - ||y_i - T_i(x_j)||_1), normalised over j.

The mixings are combined along the streams, as ALTI+ (Ferrando et al. 2022b, "Towards opening the
black box of neural machine translation: source and target contributions to the model's
predictions") does for an encoder-decoder:

    encoder  E (src_len, src_len) = identity; each encoder block: E <- keys E + own * E
    decoder  D = [D_t (tgt_len, tgt_len) | D_s (tgt_len, src_len)] = [identity | 0]
             self-attention:  D <- keys D + own * D
             cross-attention: D_t <- own * D_t,  D_s <- own * D_s + keys E

The feed-forward networks work position by position and mix nothing. Each row of D sums to 1 after
every block: D_s[i, j] is how much source token j contributed to the prediction at target row i,
D_t[i, k] how much target-prefix token k (the decoder's input k: <s>, then the output so far) did;
sum_j D_s[i, j] is the row's **source share** (Xu et al. 2023 flag hallucinations by a low one).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, get_args

import numpy as np
import torch
from torch import Tensor

from heed.nn.protocol import AttentionBlock, ContributionModel

Reading = Literal["rollout", "alti"]
READINGS: tuple[Reading, ...] = get_args(Reading)
CHUNK_ELEMENTS = 1 << 25  # ALTI holds every (query, key) term vector: at most this many numbers at once


class Mixing(NamedTuple):
    """How one block mixes its streams; for every real query row, keys.sum(-1) + own == 1."""

    keys: Tensor  # (batch, q_len, k_len) the share of each key position
    own: Tensor  # (batch, q_len) the share of the query's own stream (the residual)


class Contributions(NamedTuple):
    """Every decoder layer's output stream, as shares of the input tokens (module doc).

    source:  (layers, batch, tgt_len, src_len) D_s after each decoder layer
    target:  (layers, batch, tgt_len, tgt_len) D_t after each decoder layer (causal: row i reads
             decoder inputs 0..i)
    encoder: (batch, src_len, src_len) E after the encoder
    """

    source: Tensor
    target: Tensor
    encoder: Tensor

    def source_share(self) -> Tensor:
        """(layers, batch, tgt_len): each prediction's share from the source (the rest is the
        target prefix's)."""
        return self.source.sum(-1)

    def alignment(self) -> Tensor:
        """(layers, batch, tgt_len, src_len): the source part of each row normalised to sum to 1,
        where in the source a prediction's source share came from (0 where it has none)."""
        share = self.source.sum(-1, keepdim=True)
        return torch.where(share > 0, self.source / share.clamp_min(torch.finfo(share.dtype).tiny), 0.0)


def rollout_mixing(block: AttentionBlock) -> Mixing:
    """Abnar & Zuidema 2020: 0.5 * the heads' mean attention + 0.5 * the residual."""
    keys = 0.5 * block.weights.mean(1)  # (batch, q_len, k_len)
    return Mixing(keys, torch.full(keys.shape[:2], 0.5, dtype=keys.dtype, device=keys.device))


def alti_mixing(block: AttentionBlock) -> Mixing:
    """ALTI's contributions of one block (module doc), computed in chunks of the batch."""
    batch, q_len, k_len = block.weights.size(0), block.weights.size(2), block.weights.size(3)
    per_row = q_len * (k_len + 1) * block.values.size(-1)
    step = max(1, CHUNK_ELEMENTS // max(per_row, 1))
    parts = [_alti_chunk(block, slice(start, start + step)) for start in range(0, batch, step)]
    return Mixing(torch.cat([p.keys for p in parts]), torch.cat([p.own for p in parts]))


def _alti_chunk(block: AttentionBlock, rows: slice) -> Mixing:
    weights, values, residual, output = (t[rows] for t in (block.weights, block.values, block.residual, block.output))
    terms = torch.einsum("bhqk,bhkd->bqkd", weights, values)  # (batch, q_len, k_len, dim)
    if block.part == "cross":  # the target stream is a term of its own
        own = residual.unsqueeze(2)  # (batch, q_len, 1, dim)
    else:  # Ferrando et al. 2022a: the residual belongs to the query's own token
        q = torch.arange(terms.size(1), device=terms.device)
        terms[:, q, q] = terms[:, q, q] + residual
        own = torch.zeros_like(residual).unsqueeze(2)
    terms = torch.cat([terms, own], dim=2)  # (batch, q_len, k_len + 1, dim)
    if block.norm is not None:  # post-norm: LayerNorm(z) = gamma (z - mean z) / std(z) + beta, linear in z's terms
        total = terms.sum(2) + block.bias  # (batch, q_len, dim) the sum the norm reads
        std = (total.var(-1, unbiased=False, keepdim=True) + block.norm.eps).sqrt()  # (batch, q_len, 1)
        terms = block.norm.weight * (terms - terms.mean(-1, keepdim=True)) / std.unsqueeze(2)
    distance = (output.unsqueeze(2) - terms).abs().sum(-1)  # (batch, q_len, k_len + 1)
    closeness = (output.abs().sum(-1, keepdim=True) - distance).clamp_min(0.0)
    total = closeness.sum(-1, keepdim=True)
    # A row no term comes close to (never seen on a real model) is left to its own stream: the
    # residual's column in a cross-attention, the query's own position in a self-attention.
    fallback = torch.zeros_like(closeness)
    if block.part == "cross":
        fallback[..., -1] = 1.0
    else:
        q = torch.arange(closeness.size(1), device=closeness.device)
        fallback[:, q, q] = 1.0
    shares = torch.where(total > 0, closeness / total.clamp_min(torch.finfo(total.dtype).tiny), fallback)
    return Mixing(shares[..., :-1], shares[..., -1])


MIXINGS: dict[Reading, Callable[[AttentionBlock], Mixing]] = {"rollout": rollout_mixing, "alti": alti_mixing}


class _Streams:
    """The combination of the module doc, block by block as the pass shows them."""

    def __init__(self, mixing: Callable[[AttentionBlock], Mixing], dtype: torch.dtype) -> None:
        self.mixing, self.dtype = mixing, dtype
        self.encoder: Tensor | None = None  # E (batch, src_len, src_len)
        self.target: Tensor | None = None  # D_t (batch, tgt_len, tgt_len)
        self.source: Tensor | None = None  # D_s (batch, tgt_len, src_len)
        self.layers: list[tuple[Tensor, Tensor]] = []  # (D_s, D_t) after each decoder layer

    def __call__(self, block: AttentionBlock) -> None:
        block = block._replace(weights=block.weights.to(self.dtype), values=block.values.to(self.dtype),
                               bias=block.bias.to(self.dtype), residual=block.residual.to(self.dtype),
                               output=block.output.to(self.dtype))
        keys, own = self.mixing(block)
        own = own.unsqueeze(-1)  # (batch, q_len, 1)
        if block.part == "encoder":
            encoder = self._eye(keys) if self.encoder is None else self.encoder
            self.encoder = keys @ encoder + own * encoder
        elif block.part == "decoder":
            if self.target is None:
                batch, tgt_len = keys.shape[:2]
                self.target = self._eye(keys)
                assert self.encoder is not None, "the encoder's blocks come first"
                self.source = keys.new_zeros(batch, tgt_len, self.encoder.size(-1))
            assert self.source is not None
            self.target = keys @ self.target + own * self.target
            self.source = keys @ self.source + own * self.source
        else:
            assert self.target is not None and self.source is not None and self.encoder is not None
            self.target = own * self.target
            self.source = own * self.source + keys @ self.encoder
            self.layers.append((self.source, self.target))

    @staticmethod
    def _eye(keys: Tensor) -> Tensor:
        batch, n = keys.size(0), keys.size(1)
        return torch.eye(n, dtype=keys.dtype, device=keys.device).expand(batch, n, n)


def contributions(model: ContributionModel, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, *,
                  reading: Reading) -> Contributions:
    """The teacher-forced pass's Contributions, by `reading` ("rollout" or "alti"); computed in the
    model's dtype, float32 at least. src (batch, src_len), tgt_in (batch, tgt_len)."""
    if reading not in MIXINGS:
        raise ValueError(f"reading must be one of {', '.join(READINGS)}, got {reading!r}")
    dtype = torch.float64 if next(model.parameters()).dtype == torch.float64 else torch.float32  # type: ignore[attr-defined]
    streams = _Streams(MIXINGS[reading], dtype)
    model.attention_blocks(src, src_lengths, tgt_in, streams)
    assert streams.encoder is not None and streams.layers, "a Transformer shows its encoder and decoder blocks"
    return Contributions(torch.stack([s for s, _ in streams.layers]), torch.stack([t for _, t in streams.layers]),
                         streams.encoder)


@dataclass(frozen=True)
class SourceShare:
    """One sentence pair's ALTI+ reading at the last decoder layer: how much of each prediction came
    from the source, and how much from the output so far (the target prefix).

    src_tokens: the source tokens (without </s>); `source`'s columns are these, then </s>
    tgt_tokens: the output tokens (without </s>); rows are these, then </s>
    per_token:  (len(tgt_tokens) + 1,) each prediction's source share, 0 to 1 (the rest is the
                target prefix's)
    source:     (len(tgt_tokens) + 1, len(src_tokens) + 1) each source token's share of each
                prediction (rows sum to per_token)
    prefix:     (len(tgt_tokens) + 1, len(tgt_tokens) + 1) each decoder input's (<s>, then the
                output) share; row i reads columns 0..i
    reading:    "alti" (ALTI+) or "rollout"
    """

    src_tokens: list[str]
    tgt_tokens: list[str]
    per_token: np.ndarray
    source: np.ndarray
    prefix: np.ndarray
    reading: Reading = "alti"

    @property
    def sentence(self) -> float:
        """The sentence's source share: the mean over its predictions, </s> included."""
        return float(self.per_token.mean())

    def to_dict(self) -> dict[str, Any]:
        return {"src_tokens": self.src_tokens, "tgt_tokens": self.tgt_tokens, "reading": self.reading,
                "source_share": self.sentence, "per_token": self.per_token.tolist(), "source": self.source.tolist(),
                "prefix": self.prefix.tolist()}


__all__ = ["READINGS", "Contributions", "Mixing", "Reading", "SourceShare", "alti_mixing", "contributions", "rollout_mixing"]


# ------------------------------------------------------------------------ readings (heed.explain.readings)
def read_contributions(model: Any, codec: Any, device: torch.device, src_texts: Any, tgt_texts: Any, *,
                       max_src_len: int | None = None, reading: Reading = "alti") -> list[Any]:
    """Per pair, each decoder layer's D_s (layers, len(tgt_tokens) + 1, len(src_tokens) + 1), each
    source token's share of each prediction (rows sum to the source share), with D_t as the extra
    "prefix" (layers, target, prefix). A ContributionModel."""
    from heed.explain.pairs import forced_pairs, precision
    from heed.results import Labelled, ReadingResult

    pairs = forced_pairs(codec, src_texts, tgt_texts, max_src_len=max_src_len, empty="there is no source to share")
    out = []
    with torch.inference_mode(), precision(model, device):
        for group, batch in pairs.batches(model, device, 64):
            shares = contributions(model, batch.src, batch.src_lengths, batch.tgt_in, reading=reading)
            source, prefix = shares.source.cpu().numpy(), shares.target.cpu().numpy()  # (L, B, T, S), (L, B, T, T)
            for row, k in enumerate(group):
                s, t = pairs.sizes(k)
                out.append(ReadingResult(reading, pairs.src_tokens[k], pairs.tgt_tokens[k],
                                         ("layer", "target", "source"), source[:, row, :t, :s],
                                         {"prefix": Labelled(("layer", "target", "prefix"), prefix[:, row, :t, :t])}))
    return out


def rollout(model: Any, codec: Any, device: torch.device, src_texts: Any, tgt_texts: Any, options: Any, *,
            max_src_len: int | None = None) -> list[Any]:
    """Attention rollout through every layer (Abnar & Zuidema 2020), per decoder layer."""
    return read_contributions(model, codec, device, src_texts, tgt_texts, max_src_len=max_src_len, reading="rollout")


def alti(model: Any, codec: Any, device: torch.device, src_texts: Any, tgt_texts: Any, options: Any, *,
         max_src_len: int | None = None) -> list[Any]:
    """ALTI+ contributions through every layer (Ferrando et al. 2022b), per decoder layer."""
    return read_contributions(model, codec, device, src_texts, tgt_texts, max_src_len=max_src_len, reading="alti")
