"""Padding masks and the one masked softmax every attention score goes through.

Polarity, everywhere in heed: `mask` is bool, True = real token, False = padding.
"""
from __future__ import annotations

import torch
from torch import Tensor


def lengths_to_mask(lengths: Tensor, max_len: int | None = None) -> Tensor:
    """Mask from lengths.

    lengths: (batch,) int. Returns bool (batch, max_len), True = real token.
    """
    max_len = int(lengths.max()) if max_len is None else max_len
    positions = torch.arange(max_len, device=lengths.device)  # (max_len,)
    return positions.unsqueeze(0) < lengths.unsqueeze(1)  # (batch, max_len)


def masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    """Softmax over the last axis that gives padding exactly zero weight.

    scores: (..., src_len); mask: bool broadcastable to scores, True = real token.
    A row with no real token gets all-zero weights (not NaN, not uniform), in any float dtype,
    and its gradient is zero rather than NaN: such rows are softmaxed over zeros, then cleared.
    """
    if mask is None:
        return torch.softmax(scores, dim=-1)
    mask = mask.expand_as(scores)
    has_real = mask.any(dim=-1, keepdim=True)  # (..., 1)
    # -inf (not -1e9) so padding gets exactly 0 and nothing overflows in fp16.
    scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~has_real, 0.0)
    return torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0)
