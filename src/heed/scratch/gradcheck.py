"""Central-difference gradient checks (run them in float64).

    numerical_gradient(f, x)[i] = (f(x + eps e_i) - f(x - eps e_i)) / (2 eps)

Error measure, `rel_error(a, b)`: the largest elementwise |a - b| / max(|a| + |b|, floor), with
floor = 1e-3 * max(|a|_max, |b|_max, 1e-12). Elements a thousand times smaller than the array's
largest are judged against that scale: there the finite difference's own rounding error
(~1e-16 |f| / eps) would dominate any relative measure.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np


def numerical_gradient(f: Callable[[], float], x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Gradient of the scalar f() with respect to the array x, which f reads; x is perturbed in
    place one element at a time and restored exactly."""
    if x.dtype != np.float64:
        raise TypeError(f"gradient checks need float64, got {x.dtype}")
    grad = np.zeros_like(x)
    flat, gflat = x.reshape(-1), grad.reshape(-1)  # views: x must be contiguous
    if not np.shares_memory(flat, x):
        raise ValueError("numerical_gradient needs a contiguous array")
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        plus = f()
        flat[i] = old - eps
        minus = f()
        flat[i] = old
        gflat[i] = (plus - minus) / (2.0 * eps)
    return grad


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    """Max elementwise relative error with a scale-relative floor (see the module docstring)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    if a.size == 0:
        return 0.0
    floor = 1e-3 * max(np.abs(a).max(), np.abs(b).max(), 1e-12)
    return float((np.abs(a - b) / np.maximum(np.abs(a) + np.abs(b), floor)).max())


def check_gradients(f: Callable[[], float], arrays: dict[str, np.ndarray],
                    analytic: dict[str, np.ndarray], eps: float = 1e-5) -> dict[str, float]:
    """rel_error between `analytic[name]` and the central difference of f in `arrays[name]`,
    for every name."""
    return {name: rel_error(analytic[name], numerical_gradient(f, x, eps)) for name, x in arrays.items()}
