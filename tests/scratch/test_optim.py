"""Adam and global-norm clipping equal torch.optim.Adam and torch.nn.utils.clip_grad_norm_."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from heed.scratch import Adam, clip_grads


def test_adam_matches_torch_adam_over_several_steps():
    rng = np.random.default_rng(0)
    params = [rng.standard_normal((4, 3)), rng.standard_normal(5)]
    torch_params = [torch.nn.Parameter(torch.from_numpy(p.copy())) for p in params]
    ours, theirs = Adam(lr=0.01), torch.optim.Adam(torch_params, lr=0.01)
    for _ in range(5):
        grads = [rng.standard_normal(p.shape) for p in params]
        for tp, g in zip(torch_params, grads):
            tp.grad = torch.from_numpy(g.copy())
        ours.update(params, grads)
        theirs.step()
        for p, tp in zip(params, torch_params):
            np.testing.assert_allclose(p, tp.detach().numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grads_matches_torch_clip_grad_norm(max_norm):
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal((3, 4)), rng.standard_normal(7)]
    torch_params = [torch.nn.Parameter(torch.zeros(g.shape, dtype=torch.float64)) for g in grads]
    for tp, g in zip(torch_params, grads):
        tp.grad = torch.from_numpy(g.copy())
    total = clip_grads(grads, max_norm)
    torch_total = torch.nn.utils.clip_grad_norm_(torch_params, max_norm)
    assert total == pytest.approx(torch_total.item(), rel=1e-12)
    for g, tp in zip(grads, torch_params):
        np.testing.assert_allclose(g, tp.grad.numpy(), rtol=1e-12)
    if max_norm < total:
        assert np.sqrt(sum((g ** 2).sum() for g in grads)) == pytest.approx(max_norm, rel=1e-5)
