"""Attention as a soft dictionary look-up, in NumPy with hand-written backward passes.

    scores  = query . keys                       # (batch, [tgt_len,] src_len)   AttentionWeight
    weights = masked_softmax(scores, src_mask)   # 0 on padding, rows sum to 1
    context = weights @ values                   # (batch, [tgt_len,] hidden)    WeightSum

`keys` are whatever the score compares the query with: the encoder states themselves for Luong's
"dot" score, or W_a times them for "general" (projected once per source by the model, not here).
Those layers have no parameters. `AdditiveAttention` is Bahdanau's score (A.1.2), whose
query-side weights it owns; its keys are W_k times the states, likewise projected once per source.
mask bool (batch, src_len), True = real token.
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
        assert self.cache is not None, "backward before forward"
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
        assert self.cache is not None, "backward before forward"
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
        assert self.cache is not None, "backward before forward"
        queries, keys, values = self.cache
        weights = self.weights
        assert weights is not None
        dvalues = weights.transpose(0, 2, 1) @ dcontexts  # (batch, src_len, hidden)
        dweights = dcontexts @ values.transpose(0, 2, 1)  # (batch, tgt_len, src_len)
        dscores = softmax_backward(weights, dweights)
        dqueries = dscores @ keys  # (batch, tgt_len, hidden)
        dkeys = dscores.transpose(0, 2, 1) @ queries  # (batch, src_len, hidden)
        return dqueries, dkeys, dvalues


class AdditiveScore:
    """Bahdanau et al. 2015, A.1.2: e_{ts} = v_a^T tanh(W_a s_{t-1} + U_a h_s), here
    score = v . tanh(W_q q + b_q + keys), keys = W_k states computed once per source (`project_keys`
    of heed.nn.rnn.attention.Attention; in scratch a bias-free TimeAffine(W_k)).

    Parameters in PyTorch's layout and order, as torch's `Attention("additive")`:
        W_q (attn, query_size) = query_proj.weight, b_q (attn,) = query_proj.bias, v (1, attn) = v.weight.
    query (batch, query_size) or (batch, tgt_len, query_size), keys (batch, src_len, attn)
    -> scores (batch, src_len) or (batch, tgt_len, src_len).
    """

    def __init__(self, W_q: np.ndarray, b_q: np.ndarray, v: np.ndarray) -> None:
        self.params = [W_q, b_q, v]
        self.grads = [np.zeros_like(W_q), np.zeros_like(b_q), np.zeros_like(v)]
        self.cache: tuple | None = None

    def forward(self, query: np.ndarray, keys: np.ndarray) -> np.ndarray:
        W_q, b_q, v = self.params
        one_step = query.ndim == 2
        steps = query[:, None, :] if one_step else query  # (batch, tgt_len, query_size)
        B, T, Q = steps.shape
        q = (steps.reshape(B * T, Q) @ W_q.T).reshape(B, T, -1)  # W_a s_{t-1}: (batch, tgt_len, attn)
        q += b_q
        hidden = np.tanh(q[:, :, None, :] + keys[:, None, :, :])  # (batch, tgt_len, src_len, attn)
        scores = hidden @ v[0]  # v_a^T tanh(...): (batch, tgt_len, src_len)
        self.cache = (steps, hidden, one_step)
        return scores[:, 0] if one_step else scores

    def backward(self, dscores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """dscores (batch, [tgt_len,] src_len) -> dquery (batch, [tgt_len,] query_size),
        dkeys (batch, src_len, attn)."""
        W_q, _, v = self.params
        assert self.cache is not None, "backward before forward"
        steps, hidden, one_step = self.cache
        B, T, Q = steps.shape
        d = dscores[:, None, :] if one_step else dscores  # (batch, tgt_len, src_len)
        A = v.shape[1]
        # v: d(score)/dv = tanh(...), summed over every (batch, tgt_len, src_len)
        self.grads[2][...] = (d.reshape(1, -1) @ hidden.reshape(-1, A))  # (1, attn)
        dpre = d[..., None] * v[0]  # (batch, tgt_len, src_len, attn)
        dpre *= 1.0 - hidden * hidden  # tanh'
        dkeys = dpre.sum(axis=1)  # (batch, src_len, attn): keys enter every step's score
        dq = dpre.sum(axis=2).reshape(B * T, A)  # (batch * tgt_len, attn)
        np.matmul(dq.T, steps.reshape(B * T, Q), out=self.grads[0])  # (attn, query_size)
        self.grads[1][...] = dq.sum(axis=0)
        dquery = (dq @ W_q).reshape(B, T, Q)
        return (dquery[:, 0] if one_step else dquery), dkeys


class AdditiveAttention:
    """AdditiveScore, masked_softmax, then the weighted sum of values, for one step or all steps.

    query (batch, [tgt_len,] query_size), keys (batch, src_len, attn) = W_k states,
    values (batch, src_len, hidden), mask (batch, src_len)
    -> context (batch, [tgt_len,] hidden); `weights` (batch, [tgt_len,] src_len) are kept.
    `params`/`grads` are the score's: W_q, b_q, v.
    """

    def __init__(self, W_q: np.ndarray, b_q: np.ndarray, v: np.ndarray) -> None:
        self.score = AdditiveScore(W_q, b_q, v)
        self.params = self.score.params
        self.grads = self.score.grads
        self.weights: np.ndarray | None = None
        self.values: np.ndarray | None = None

    def forward(self, query: np.ndarray, keys: np.ndarray, values: np.ndarray,
                mask: np.ndarray | None = None) -> np.ndarray:
        scores = self.score.forward(query, keys)  # (batch, [tgt_len,] src_len)
        if mask is not None and scores.ndim == 3:
            mask = mask[:, None, :]  # (batch, 1, src_len)
        self.weights = masked_softmax(scores, mask)  # Bahdanau et al. 2015, A.1.2: alpha_ij
        self.values = values
        return self.weights @ values if scores.ndim == 3 else (self.weights[:, None, :] @ values)[:, 0]

    def backward(self, dcontext: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """dcontext (batch, [tgt_len,] hidden) -> dquery (batch, [tgt_len,] query_size),
        dkeys (batch, src_len, attn), dvalues (batch, src_len, hidden)."""
        weights, values = self.weights, self.values
        assert weights is not None and values is not None, "backward before forward"
        w = weights[:, None, :] if weights.ndim == 2 else weights  # (batch, tgt_len, src_len)
        dc = dcontext[:, None, :] if dcontext.ndim == 2 else dcontext  # (batch, tgt_len, hidden)
        dvalues = w.transpose(0, 2, 1) @ dc  # (batch, src_len, hidden)
        dweights = dc @ values.transpose(0, 2, 1)  # (batch, tgt_len, src_len)
        dscores = softmax_backward(w, dweights)  # 0 wherever the weight is 0 (padding)
        dquery, dkeys = self.score.backward(dscores if weights.ndim == 3 else dscores[:, 0])
        return dquery, dkeys, dvalues
