"""NumPy layers with hand-written backward passes ("Deep Learning from Scratch 2", ch. 5-8).

One protocol for every layer:
    params   list of arrays (the weights, never copied: an optimizer updates them in place)
    grads    arrays of the same shapes; `backward` writes them in place (`grads[0][...] = ...`)
    forward(...)   computes and caches what backward needs
    backward(dout) returns the gradient of the inputs and fills `grads`

Weights use PyTorch's layout so they copy across without permutation: a matrix is (out, in), an
LSTM's four gates are stacked in the order i, f, g, o, and its one bias is torch's b_ih + b_hh.
A layer computes in the dtype of its weights (float32 to train, float64 for gradient checks).
Mask polarity: bool, True = real token.
"""
from __future__ import annotations

import functools

import numpy as np

from heed.scratch.functions import log_softmax, softmax


class Embedding:
    """Rows of W by id. ids (batch,) -> (batch, embed), or any shape of ids (..., ) -> (..., embed).

    W (vocab, embed). With `padding_idx`, that row gets no gradient (as torch's padding_idx).
    """

    def __init__(self, W: np.ndarray, padding_idx: int | None = None) -> None:
        self.params = [W]
        self.grads = [np.zeros_like(W)]
        self.padding_idx = padding_idx
        self.ids: np.ndarray | None = None

    def forward(self, ids: np.ndarray) -> np.ndarray:
        self.ids = ids
        return self.params[0][ids]

    def backward(self, dout: np.ndarray) -> None:
        (dW,) = self.grads
        dW[...] = 0.0
        assert self.ids is not None, "backward before forward"
        np.add.at(dW, self.ids.ravel(), dout.reshape(-1, dW.shape[1]))  # repeated ids add up
        if self.padding_idx is not None:
            dW[self.padding_idx] = 0.0


class TimeEmbedding(Embedding):
    """Embedding over a whole sequence: ids (batch, T) -> (batch, T, embed)."""


class Affine:
    """x @ W.T + b. x (batch, in) -> (batch, out); W (out, in), b (out,) or None for no bias.

    Any leading shape works: (..., in) -> (..., out).
    """

    def __init__(self, W: np.ndarray, b: np.ndarray | None = None) -> None:
        self.params = [W] if b is None else [W, b]
        self.grads = [np.zeros_like(p) for p in self.params]
        self.x: np.ndarray | None = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        W = self.params[0]
        self.x = x
        # As one 2-D matmul: a stacked (batch, T, in) @ (in, out) would run T-sized matmuls.
        out = x.reshape(-1, W.shape[1]) @ W.T  # (rows, out)
        if len(self.params) == 2:
            out += self.params[1]
        return out.reshape(*x.shape[:-1], W.shape[0])  # (..., out)

    def backward(self, dout: np.ndarray) -> np.ndarray:
        W = self.params[0]
        assert self.x is not None, "backward before forward"
        x2 = self.x.reshape(-1, W.shape[1])  # (rows, in)
        d2 = dout.reshape(-1, W.shape[0])  # (rows, out)
        np.matmul(d2.T, x2, out=self.grads[0])  # (out, in)
        if len(self.params) == 2:
            self.grads[1][...] = d2.sum(axis=0)
        return (d2 @ W).reshape(self.x.shape)  # (..., in)


class TimeAffine(Affine):
    """Affine over a whole sequence: x (batch, T, in) -> (batch, T, out), as one matmul."""


class Tanh:
    """Elementwise tanh; no parameters."""

    def __init__(self) -> None:
        self.params: list[np.ndarray] = []
        self.grads: list[np.ndarray] = []
        self.out: np.ndarray | None = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        self.out = np.tanh(x)
        return self.out

    def backward(self, dout: np.ndarray) -> np.ndarray:
        assert self.out is not None, "backward before forward"
        return dout * (1.0 - self.out * self.out)


class Softmax:
    """Softmax over the last axis; no parameters."""

    def __init__(self) -> None:
        self.params: list[np.ndarray] = []
        self.grads: list[np.ndarray] = []
        self.out: np.ndarray | None = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        self.out = softmax(x)
        return self.out

    def backward(self, dout: np.ndarray) -> np.ndarray:
        y = self.out
        return y * (dout - (dout * y).sum(axis=-1, keepdims=True))


class SoftmaxWithLoss:
    """Cross-entropy of softmax(logits) against target ids, the mean over real (non-ignored) tokens.

    logits (..., vocab), targets (...) int -> scalar loss. Targets equal to `ignore_index` (padding)
    add nothing, exactly as torch's cross_entropy(ignore_index=..., reduction="mean").
    With no real token at all the loss is 0 (torch gives NaN there).
    """

    def __init__(self, ignore_index: int | None = 0) -> None:
        self.params: list[np.ndarray] = []
        self.grads: list[np.ndarray] = []
        self.ignore_index = ignore_index
        self.cache: tuple[np.ndarray, np.ndarray, np.ndarray, int, tuple[int, ...]] | None = None

    def forward(self, logits: np.ndarray, targets: np.ndarray) -> float:
        vocab = logits.shape[-1]
        logp = log_softmax(logits.reshape(-1, vocab))  # (rows, vocab)
        t = targets.reshape(-1)
        valid = np.ones(t.shape, bool) if self.ignore_index is None else t != self.ignore_index
        count = int(valid.sum())
        picked = logp[np.arange(t.size), t]  # (rows,)
        self.cache = (logp, t, valid, count, logits.shape)
        return float(-(picked * valid).sum() / max(count, 1))

    def backward(self, dout: float = 1.0) -> np.ndarray:
        assert self.cache is not None, "backward before forward"
        logp, t, valid, count, shape = self.cache
        dx = np.exp(logp)  # softmax (rows, vocab)
        dx[np.arange(t.size), t] -= 1.0
        dx *= (valid * (dout / max(count, 1)))[:, None].astype(dx.dtype)
        return dx.reshape(shape)


class LSTM:
    """One LSTM step (Hochreiter & Schmidhuber 1997; torch's gate order i, f, g, o).

    x (batch, in), h_prev (batch, hidden), c_prev (batch, hidden) -> h (batch, hidden), c.
    Wx (4*hidden, in), Wh (4*hidden, hidden), b (4*hidden,) = torch's b_ih + b_hh.
        A = x Wx^T + h_prev Wh^T + b;  i, f, o = sigmoid;  g = tanh
        c = f * c_prev + i * g;  h = o * tanh(c)
    """

    def __init__(self, Wx: np.ndarray, Wh: np.ndarray, b: np.ndarray) -> None:
        self.params = [Wx, Wh, b]
        self.grads = [np.zeros_like(Wx), np.zeros_like(Wh), np.zeros_like(b)]
        self.cache: tuple | None = None

    def forward(self, x: np.ndarray, h_prev: np.ndarray, c_prev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        Wx, Wh, b = self.params
        H = Wh.shape[1]
        A = x @ Wx.T  # (batch, 4 * hidden)
        A += h_prev @ Wh.T
        A += b
        _activate_gates(A, H)
        i, f, g, o = A[:, :H], A[:, H:2 * H], A[:, 2 * H:3 * H], A[:, 3 * H:]
        c = f * c_prev + i * g
        tanh_c = np.tanh(c)
        h = o * tanh_c
        self.cache = (x, h_prev, c_prev, A, tanh_c)
        return h, c

    def backward(self, dh: np.ndarray, dc: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """dh, dc (batch, hidden) -> dx (batch, in), dh_prev, dc_prev."""
        Wx, Wh, _ = self.params
        assert self.cache is not None, "backward before forward"
        x, h_prev, c_prev, gates, tanh_c = self.cache
        dA = np.empty_like(gates)
        dc_prev = _gate_grads(dA, gates, tanh_c, c_prev, dh, dc)
        self.grads[0][...] = dA.T @ x
        self.grads[1][...] = dA.T @ h_prev
        self.grads[2][...] = dA.sum(axis=0)
        return dA @ Wx, dA @ Wh, dc_prev


@functools.lru_cache(maxsize=16)
def _gate_affine(H: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(scale, shift), each (4H,): gates = scale * tanh(scale * A) + shift gives sigmoid on i, f, o
    (sigmoid(x) = 0.5 tanh(x / 2) + 0.5) and tanh on g."""
    scale = np.full(4 * H, 0.5, dtype)
    scale[2 * H:3 * H] = 1.0
    shift = np.full(4 * H, 0.5, dtype)
    shift[2 * H:3 * H] = 0.0
    return scale, shift


def _activate_gates(A: np.ndarray, H: int) -> None:
    """In place: pre-activations (batch, 4H) -> gates i, f, o = sigmoid, g = tanh.

    One tanh over the whole contiguous row (NumPy's vectorised tanh is several times slower on
    the strided quarter-slices)."""
    scale, shift = _gate_affine(H, A.dtype)
    A *= scale
    np.tanh(A, out=A)
    A *= scale
    A += shift


def _gate_grads(dA: np.ndarray, gates: np.ndarray, tanh_c: np.ndarray, c_prev: np.ndarray,
                dh: np.ndarray, dc: np.ndarray) -> np.ndarray:
    """Fill dA (batch, 4H) with the gradient of the gate pre-activations; return dc_prev.

    dh, dc: gradients of this step's new h and c. ds = dc + dh * o * (1 - tanh(c)^2).
    """
    H = tanh_c.shape[1]
    i, f, g, o = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:3 * H], gates[:, 3 * H:]
    ds = o * (1.0 - tanh_c * tanh_c)
    ds *= dh
    ds += dc
    di, df, dg, do = dA[:, :H], dA[:, H:2 * H], dA[:, 2 * H:3 * H], dA[:, 3 * H:]
    np.multiply(ds, g, out=di)
    di *= i * (1.0 - i)  # sigmoid'
    np.multiply(ds, c_prev, out=df)
    df *= f * (1.0 - f)
    np.multiply(ds, i, out=dg)
    dg *= 1.0 - g * g  # tanh'
    np.multiply(dh, tanh_c, out=do)
    do *= o * (1.0 - o)
    ds *= f
    return ds  # dc_prev


class TimeLSTM:
    """An LSTM over a whole sequence, with an optional mask that makes it equal torch's packed
    sequences: at a padded step the state (h, c) carries over unchanged and the output is 0.

    xs (batch, T, in) -> hs (batch, T, hidden). h0, c0 (batch, hidden) start the state (zeros if
    None); after forward, `h` and `c` (batch, hidden) are the final state, i.e. the state after each
    row's last real step. mask bool (batch, T), True = real step.
    backward(dhs, dh, dc) takes the gradients of hs and of the final (h, c), returns dxs and sets
    `dh0`, `dc0`, the gradients of the initial state.

    The input projection xs Wx^T + b runs as one matmul over all steps, and so do the weight
    gradients in backward; only h Wh^T and the gate arithmetic are per step.
    """

    def __init__(self, Wx: np.ndarray, Wh: np.ndarray, b: np.ndarray) -> None:
        self.params = [Wx, Wh, b]
        self.grads = [np.zeros_like(Wx), np.zeros_like(Wh), np.zeros_like(b)]
        self.h: np.ndarray | None = None
        self.c: np.ndarray | None = None
        self.dh0: np.ndarray | None = None
        self.dc0: np.ndarray | None = None
        self.cache: tuple | None = None

    def forward(self, xs: np.ndarray, h0: np.ndarray | None = None, c0: np.ndarray | None = None,
                mask: np.ndarray | None = None) -> np.ndarray:
        Wx, Wh, b = self.params
        B, T, D = xs.shape
        H = Wh.shape[1]
        dtype = Wh.dtype
        # Time-major inside, so each step's slice is contiguous.
        x_tm = np.ascontiguousarray(xs.transpose(1, 0, 2), dtype=dtype).reshape(T * B, D)
        gates = (x_tm @ Wx.T).reshape(T, B, 4 * H)  # (T, batch, 4H): input part of A, all steps
        gates += b
        hs_state = np.empty((T + 1, B, H), dtype)  # h entering each step, then the final h
        cs_state = np.empty((T + 1, B, H), dtype)
        tanh_c = np.empty((T, B, H), dtype)
        hs_state[0] = 0.0 if h0 is None else h0
        cs_state[0] = 0.0 if c0 is None else c0
        mask_tm = None if mask is None else np.ascontiguousarray(mask.T)[:, :, None]  # (T, batch, 1)
        out = np.empty((T, B, H), dtype) if mask is not None else hs_state[1:]
        WhT = Wh.T
        for t in range(T):
            A = gates[t]  # (batch, 4H)
            A += hs_state[t] @ WhT
            _activate_gates(A, H)
            i, f, g, o = A[:, :H], A[:, H:2 * H], A[:, 2 * H:3 * H], A[:, 3 * H:]
            c = cs_state[t + 1]
            np.multiply(f, cs_state[t], out=c)
            c += i * g
            np.tanh(c, out=tanh_c[t])
            h = hs_state[t + 1]
            np.multiply(o, tanh_c[t], out=h)
            if mask_tm is not None:
                m = mask_tm[t]  # (batch, 1)
                np.multiply(h, m, out=out[t])  # padding outputs 0
                np.copyto(h, hs_state[t], where=~m)  # ... and carries the state unchanged
                np.copyto(c, cs_state[t], where=~m)
        self.h, self.c = hs_state[T].copy(), cs_state[T].copy()
        self.cache = (x_tm, gates, hs_state, cs_state, tanh_c, mask_tm, (B, T, D))
        return np.ascontiguousarray(out.transpose(1, 0, 2))  # (batch, T, hidden)

    def backward(self, dhs: np.ndarray, dh: np.ndarray | None = None, dc: np.ndarray | None = None) -> np.ndarray:
        Wx, Wh, _ = self.params
        assert self.cache is not None, "backward before forward"
        x_tm, gates, hs_state, cs_state, tanh_c, mask_tm, (B, T, D) = self.cache
        H = Wh.shape[1]
        dtype = Wh.dtype
        dh = np.zeros((B, H), dtype) if dh is None else dh.astype(dtype, copy=True)
        dc = np.zeros((B, H), dtype) if dc is None else dc.astype(dtype, copy=True)
        dA_all = np.empty((T, B, 4 * H), dtype)
        for t in reversed(range(T)):
            dh_new = dh + dhs[:, t]  # gradient of this step's h: from the next step and the output
            dc_new = dc
            if mask_tm is not None:
                # h_t = m * h_new + (1 - m) * h_prev: padded rows pass dh, dc straight through.
                m = mask_tm[t]
                dh_new *= m
                dc_new = dc * m
                keep = ~m
            dc_prev = _gate_grads(dA_all[t], gates[t], tanh_c[t], cs_state[t], dh_new, dc_new)
            dh_prev = dA_all[t] @ Wh  # (batch, hidden)
            if mask_tm is not None:
                dh_prev += dh * keep
                dc_prev += dc * keep
            dh, dc = dh_prev, dc_prev
        dA2 = dA_all.reshape(T * B, 4 * H)
        np.matmul(dA2.T, x_tm, out=self.grads[0])  # (4H, in), all steps in one matmul
        np.matmul(dA2.T, hs_state[:T].reshape(T * B, H), out=self.grads[1])  # (4H, hidden)
        self.grads[2][...] = dA2.sum(axis=0)
        self.dh0, self.dc0 = dh, dc
        dxs = (dA2 @ Wx).reshape(T, B, D)
        return np.ascontiguousarray(dxs.transpose(1, 0, 2))  # (batch, T, in)
