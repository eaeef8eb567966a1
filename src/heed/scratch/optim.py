"""Optimizer and gradient clipping for lists of NumPy arrays, updated in place."""
from __future__ import annotations

import numpy as np


class Adam:
    """Adam (Kingma & Ba 2015, Algorithm 1) in the exact form of torch.optim.Adam's defaults
    (no weight decay, no amsgrad):

        m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
        p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
    """

    def __init__(self, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8) -> None:
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.t = 0
        self.m: list[np.ndarray] | None = None
        self.v: list[np.ndarray] | None = None

    def update(self, params: list[np.ndarray], grads: list[np.ndarray]) -> None:
        if self.m is None or self.v is None:
            self.m = [np.zeros_like(p) for p in params]
            self.v = [np.zeros_like(p) for p in params]
        self.t += 1
        step_size = self.lr / (1.0 - self.beta1 ** self.t)
        bias_correction2_sqrt = np.sqrt(1.0 - self.beta2 ** self.t)
        for p, g, m, v in zip(params, grads, self.m, self.v):
            m *= self.beta1
            m += (1.0 - self.beta1) * g
            v *= self.beta2
            v += (1.0 - self.beta2) * (g * g)
            denom = np.sqrt(v)
            denom /= bias_correction2_sqrt
            denom += self.eps
            p -= step_size * (m / denom)


def clip_grads(grads: list[np.ndarray], max_norm: float) -> float:
    """Scale all grads in place so their global L2 norm is at most max_norm, as
    torch.nn.utils.clip_grad_norm_ does (coefficient max_norm / (norm + 1e-6), capped at 1).
    Returns the norm before clipping."""
    total = float(np.sqrt(sum(float(np.vdot(g, g)) for g in grads)))
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for g in grads:
            g *= coef
    return total
