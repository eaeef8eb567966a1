"""The Transformer's two new layers in NumPy, forward and backward: layer normalisation and
multi-head attention (Vaswani et al. 2017, 3.2.2). The teaching twin of self-attention, as
heed.scratch.attention is of the RNN decoders' attention; same layer protocol (params, grads,
forward, backward writing grads in place).

Weights in PyTorch's layout, so they copy across without permutation:
    LayerNorm            gamma (d,), beta (d,)                        = nn.LayerNorm's weight, bias
    MultiHeadAttention   in_proj_weight (3 d, d): W_q, W_k, W_v stacked = nn.MultiheadAttention's
                         in_proj_bias (3 d,), out_proj.weight (d, d), out_proj.bias (d,)

Mask polarity, as everywhere in heed: `mask` bool (batch, src_len), True = real token. Every head's
weights come back, (batch, heads, tgt_len, src_len), and a query row with no real key gets all-zero
weights (heed's masked softmax), where torch's nn.MultiheadAttention gives NaN.
"""
from __future__ import annotations

import numpy as np

from heed.scratch.functions import masked_softmax, softmax_backward


class LayerNorm:
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis (Ba et al. 2016); var is
    the biased variance, as torch's. x (..., d) -> (..., d)."""

    def __init__(self, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5) -> None:
        self.params = [gamma, beta]
        self.grads = [np.zeros_like(gamma), np.zeros_like(beta)]
        self.eps = eps
        self.xhat: np.ndarray | None = None
        self.inv_std: np.ndarray | None = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        gamma, beta = self.params
        mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
        var = x.var(axis=-1, keepdims=True)  # (..., 1), biased
        self.inv_std = 1.0 / np.sqrt(var + self.eps)
        self.xhat = (x - mean) * self.inv_std  # (..., d)
        return self.xhat * gamma + beta

    def backward(self, dout: np.ndarray) -> np.ndarray:
        gamma = self.params[0]
        d = dout.shape[-1]
        rows = dout.reshape(-1, d)
        assert self.xhat is not None, "backward before forward"
        xhat = self.xhat.reshape(-1, d)
        self.grads[0][...] = (rows * xhat).sum(axis=0)
        self.grads[1][...] = rows.sum(axis=0)
        dxhat = dout * gamma  # (..., d)
        # d/dx of (x - mean) * inv_std: the mean and the variance depend on every x of the row.
        dx = (dxhat - dxhat.mean(axis=-1, keepdims=True)
              - self.xhat * (dxhat * self.xhat).mean(axis=-1, keepdims=True)) * self.inv_std
        return dx


class MultiHeadAttention:
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W_o, head_i = softmax(Q W_q^i (K W_k^i)^T / sqrt(d_k)) V W_v^i
    (Vaswani et al. 2017, eq. 1 and 3.2.2), d_k = d / heads.

    forward(query (batch, tgt_len, d), key (batch, src_len, d), value (batch, src_len, d),
            mask (batch, src_len) or None, causal: each query position t sees keys <= t)
      -> out (batch, tgt_len, d); `self.weights` (batch, heads, tgt_len, src_len) is every head's.
    backward(dout) -> (dquery, dkey, dvalue); self-attention passes the same array three times and
    adds the three gradients."""

    def __init__(self, in_proj_weight: np.ndarray, in_proj_bias: np.ndarray, out_weight: np.ndarray,
                 out_bias: np.ndarray, heads: int) -> None:
        d = out_weight.shape[0]
        if d % heads:
            raise ValueError(f"d_model {d} is not divisible by {heads} heads")
        self.params = [in_proj_weight, in_proj_bias, out_weight, out_bias]
        self.grads = [np.zeros_like(p) for p in self.params]
        self.heads, self.d = heads, d
        self.cache: tuple[np.ndarray, ...] | None = None
        self.weights: np.ndarray | None = None

    def _split(self, x: np.ndarray) -> np.ndarray:
        """(batch, T, d) -> (batch, heads, T, d_k)."""
        b, t, _ = x.shape
        return x.reshape(b, t, self.heads, self.d // self.heads).transpose(0, 2, 1, 3)

    def _merge(self, x: np.ndarray) -> np.ndarray:
        """(batch, heads, T, d_k) -> (batch, T, d)."""
        b, h, t, dk = x.shape
        return x.transpose(0, 2, 1, 3).reshape(b, t, h * dk)

    def forward(self, query: np.ndarray, key: np.ndarray, value: np.ndarray, mask: np.ndarray | None = None,
                causal: bool = False) -> np.ndarray:
        w_in, b_in, w_out, b_out = self.params
        d = self.d
        q = query @ w_in[:d].T + b_in[:d]  # (batch, tgt_len, d)
        k = key @ w_in[d : 2 * d].T + b_in[d : 2 * d]  # (batch, src_len, d)
        v = value @ w_in[2 * d :].T + b_in[2 * d :]  # (batch, src_len, d)
        qh, kh, vh = self._split(q), self._split(k), self._split(v)  # (batch, heads, T, d_k)
        scale = 1.0 / np.sqrt(d // self.heads)
        scores = (qh @ kh.transpose(0, 1, 3, 2)) * scale  # (batch, heads, tgt_len, src_len)
        allowed = np.ones(scores.shape, dtype=bool)
        if mask is not None:
            allowed &= mask[:, None, None, :]
        if causal:
            allowed &= np.tril(np.ones(scores.shape[-2:], dtype=bool))
        weights = masked_softmax(scores, allowed)
        context = self._merge(weights @ vh)  # (batch, tgt_len, d)
        self.weights = weights
        self.cache = (query, key, value, qh, kh, vh, weights, context, scale)
        return context @ w_out.T + b_out

    def backward(self, dout: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        assert self.cache is not None, "backward before forward"
        query, key, value, qh, kh, vh, weights, context, scale = self.cache
        w_in, _, w_out, _ = self.params
        d = self.d
        dw_in, db_in, dw_out, db_out = self.grads
        dw_out[...] = dout.reshape(-1, d).T @ context.reshape(-1, d)  # (d, d)
        db_out[...] = dout.reshape(-1, d).sum(axis=0)
        dcontext = self._split(dout @ w_out)  # (batch, heads, tgt_len, d_k)
        dweights = dcontext @ vh.transpose(0, 1, 3, 2)  # (batch, heads, tgt_len, src_len)
        dvh = weights.transpose(0, 1, 3, 2) @ dcontext  # (batch, heads, src_len, d_k)
        dscores = softmax_backward(weights, dweights) * scale
        dqh = dscores @ kh  # (batch, heads, tgt_len, d_k)
        dkh = dscores.transpose(0, 1, 3, 2) @ qh  # (batch, heads, src_len, d_k)
        grads_in = []
        for part, (x, dh) in enumerate(((query, dqh), (key, dkh), (value, dvh))):
            dproj = self._merge(dh)  # (batch, T, d)
            rows = slice(part * d, (part + 1) * d)
            dw_in[rows] = dproj.reshape(-1, d).T @ x.reshape(-1, d)
            db_in[rows] = dproj.reshape(-1, d).sum(axis=0)
            grads_in.append(dproj @ w_in[rows])
        return grads_in[0], grads_in[1], grads_in[2]


__all__ = ["LayerNorm", "MultiHeadAttention"]
