"""Stateless NumPy functions the layers share: softmax, log-softmax and the one masked softmax.

Mask polarity, as everywhere in heed: `mask` is bool, True = real token, False = padding.
"""
from __future__ import annotations

import numpy as np


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, shifted by the row maximum for stability."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return e


def log_softmax(x: np.ndarray) -> np.ndarray:
    """log(softmax(x)) over the last axis without forming softmax first."""
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def masked_softmax(scores: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Softmax over the last axis that gives padding exactly zero weight.

    scores (..., src_len); mask bool broadcastable to scores, True = real token.
    A row with no real token gets all-zero weights (not NaN, not uniform): padding is set to
    -inf, so exp gives exactly 0, and a row whose sum is 0 is divided by 1 instead.
    Backward is the plain softmax backward `w * (dw - sum(dw * w))`, which is 0 wherever w is 0.
    """
    if mask is None:
        return softmax(scores)
    masked = np.where(mask, scores, -np.inf)  # (..., src_len)
    row_max = masked.max(axis=-1, keepdims=True)  # -inf for an all-padding row
    row_max[~np.isfinite(row_max)] = 0.0
    masked -= row_max
    np.exp(masked, out=masked)  # exp(-inf) = 0 on padding
    total = masked.sum(axis=-1, keepdims=True)
    total[total == 0.0] = 1.0  # an all-padding row stays all zeros
    masked /= total
    return masked


def softmax_backward(weights: np.ndarray, dweights: np.ndarray) -> np.ndarray:
    """Gradient of the scores of a (masked) softmax over the last axis: w * (dw - sum(dw * w))."""
    dscores = weights * dweights
    dscores -= weights * dscores.sum(axis=-1, keepdims=True)
    return dscores


def lengths_to_mask(lengths: np.ndarray, max_len: int | None = None) -> np.ndarray:
    """lengths (batch,) int -> bool (batch, max_len), True = real token."""
    lengths = np.asarray(lengths)
    max_len = int(lengths.max(initial=0)) if max_len is None else max_len
    return np.arange(max_len)[None, :] < lengths[:, None]  # (batch, max_len)
