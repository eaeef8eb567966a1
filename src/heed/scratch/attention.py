"""Attention as a soft dictionary look-up, in NumPy with hand-written backward passes.

    scores  = query . keys                       # (batch, [tgt_len,] src_len)   AttentionWeight
    weights = masked_softmax(scores, src_mask)   # 0 on padding, rows sum to 1
    context = weights @ values                   # (batch, [tgt_len,] hidden)    WeightSum

`keys` are whatever the score compares the query with: the encoder states themselves for Luong's
"dot" score, or W_a times them for "general" (projected once per source by the model, not here).
None of these layers has parameters; mask bool (batch, src_len), True = real token.
"""
from __future__ import annotations

import numpy as np

from heed.scratch.functions import masked_softmax, softmax_backward


class AttentionWeight:
    """One decoder step's weights. query (batch, hidden), keys (batch, src_len, hidden),
    mask (batch, src_len) -> weights (batch, src_len)."""

    def __init__(self) -> None:
        self.params: list[np.ndarray] = []
        self.grads: list[np.ndarray] = []
        self.cache: tuple | None = None

    def forward(self, query: np.ndarray, keys: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        scores = (keys @ query[:, :, None])[:, :, 0]  # (batch, src_len)
        weights = masked_softmax(scores, mask)
        self.cache = (query, keys, weights)
        return weights

    def backward(self, dweights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """dweights (batch, src_len) -> dquery (batch, hidden), dkeys (batch, src_len, hidden)."""
        query, keys, weights = self.cache
        dscores = softmax_backward(weights, dweights)  # (batch, src_len)
        dquery = (dscores[:, None, :] @ keys)[:, 0]  # (batch, hidden)
        dkeys = dscores[:, :, None] * query[:, None, :]  # (batch, src_len, hidden)
        return dquery, dkeys


class WeightSum:
    """Context as the weighted sum of values. values (batch, src_len, hidden),
    weights (batch, src_len) -> context (batch, hidden)."""

    def __init__(self) -> None:
        self.params: list[np.ndarray] = []
        self.grads: list[np.ndarray] = []
        self.cache: tuple | None = None

    def forward(self, values: np.ndarray, weights: np.ndarray) -> np.ndarray:
        self.cache = (values, weights)
        return (weights[:, None, :] @ values)[:, 0]  # (batch, hidden)

    def backward(self, dcontext: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """dcontext (batch, hidden) -> dvalues (batch, src_len, hidden), dweights (batch, src_len)."""
        values, weights = self.cache
        dvalues = weights[:, :, None] * dcontext[:, None, :]
        dweights = (values @ dcontext[:, :, None])[:, :, 0]
        return dvalues, dweights


class Attention:
    """One decoder step: AttentionWeight then WeightSum.

    query (batch, hidden), keys and values (batch, src_len, hidden), mask (batch, src_len)
    -> context (batch, hidden); `weights` (batch, src_len) are kept for inspection.
    """

    def __init__(self) -> None:
        self.params: list[np.ndarray] = []
        self.grads: list[np.ndarray] = []
        self.weight_layer = AttentionWeight()
        self.sum_layer = WeightSum()
        self.weights: np.ndarray | None = None

    def forward(self, query: np.ndarray, keys: np.ndarray, values: np.ndarray,
                mask: np.ndarray | None = None) -> np.ndarray:
        self.weights = self.weight_layer.forward(query, keys, mask)
        return self.sum_layer.forward(values, self.weights)

    def backward(self, dcontext: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """-> dquery (batch, hidden), dkeys, dvalues (batch, src_len, hidden)."""
        dvalues, dweights = self.sum_layer.backward(dcontext)
        dquery, dkeys = self.weight_layer.backward(dweights)
        return dquery, dkeys, dvalues


class TimeAttention:
    """Attention for every decoder step at once, as batched matmuls (no loop over time).

    queries (batch, tgt_len, hidden), keys and values (batch, src_len, hidden),
    mask (batch, src_len) -> contexts (batch, tgt_len, hidden);
    `weights` (batch, tgt_len, src_len) are kept for inspection.
    """

    def __init__(self) -> None:
        self.params: list[np.ndarray] = []
        self.grads: list[np.ndarray] = []
        self.weights: np.ndarray | None = None
        self.cache: tuple | None = None

    def forward(self, queries: np.ndarray, keys: np.ndarray, values: np.ndarray,
                mask: np.ndarray | None = None) -> np.ndarray:
        scores = queries @ keys.transpose(0, 2, 1)  # (batch, tgt_len, src_len)
        self.weights = masked_softmax(scores, None if mask is None else mask[:, None, :])
        self.cache = (queries, keys, values)
        return self.weights @ values  # (batch, tgt_len, hidden)

    def backward(self, dcontexts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """dcontexts (batch, tgt_len, hidden) -> dqueries (batch, tgt_len, hidden),
        dkeys, dvalues (batch, src_len, hidden)."""
        queries, keys, values = self.cache
        weights = self.weights
        dvalues = weights.transpose(0, 2, 1) @ dcontexts  # (batch, src_len, hidden)
        dweights = dcontexts @ values.transpose(0, 2, 1)  # (batch, tgt_len, src_len)
        dscores = softmax_backward(weights, dweights)
        dqueries = dscores @ keys  # (batch, tgt_len, hidden)
        dkeys = dscores.transpose(0, 2, 1) @ queries  # (batch, src_len, hidden)
        return dqueries, dkeys, dvalues
