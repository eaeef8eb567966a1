"""The NumPy engine's layer norm and multi-head attention: gradients equal central differences in
float64, and forward, every head's weights and backward equal torch's nn.LayerNorm and
nn.MultiheadAttention with the same weights."""
from __future__ import annotations

import numpy as np
import pytest

from heed.scratch.gradcheck import check_gradients, rel_error
from heed.scratch.transformer import LayerNorm, MultiHeadAttention

B, TQ, TK, D, HEADS = 2, 3, 4, 8, 2
MASK = np.array([[True, True, True, False], [True, True, False, False]])  # (batch, src_len), True = real


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(3)


def _mha(rng: np.random.Generator) -> MultiHeadAttention:
    return MultiHeadAttention(rng.standard_normal((3 * D, D)) * 0.4, rng.standard_normal(3 * D) * 0.1,
                              rng.standard_normal((D, D)) * 0.4, rng.standard_normal(D) * 0.1, HEADS)


def test_layer_norm_gradients_match_central_differences(rng):
    layer = LayerNorm(rng.standard_normal(D), rng.standard_normal(D))
    x = rng.standard_normal((B, TQ, D))
    r = rng.standard_normal((B, TQ, D))

    def f() -> float:
        return float((layer.forward(x) * r).sum())

    f()
    dx = layer.backward(r)
    errors = check_gradients(f, {"x": x, "gamma": layer.params[0], "beta": layer.params[1]},
                             {"x": dx, "gamma": layer.grads[0].copy(), "beta": layer.grads[1].copy()})
    assert max(errors.values()) < 1e-6, errors


@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_attention_gradients_match_central_differences(rng, causal):
    layer = _mha(rng)
    query, key, value = (rng.standard_normal((B, t, D)) for t in (TQ, TK, TK))
    mask = None if causal else MASK
    r = rng.standard_normal((B, TQ, D))

    def f() -> float:
        return float((layer.forward(query, key, value, mask, causal=causal) * r).sum())

    f()
    dq, dk, dv = layer.backward(r)
    names = ["in_proj_weight", "in_proj_bias", "out_weight", "out_bias"]
    errors = check_gradients(f, {"query": query, "key": key, "value": value, **dict(zip(names, layer.params))},
                             {"query": dq, "key": dk, "value": dv,
                              **{n: g.copy() for n, g in zip(names, layer.grads)}})
    assert max(errors.values()) < 1e-6, errors


def test_padding_gets_zero_weight_and_an_all_padding_row_gives_zeros_not_nan(rng):
    layer = _mha(rng)
    x = rng.standard_normal((B, TK, D))
    layer.forward(x, x, x, np.array([[True, True, False, False], [False, False, False, False]]))
    w = layer.weights  # (batch, heads, tgt_len, src_len)
    assert w.shape == (B, HEADS, TK, TK)
    assert np.all(w[0, :, :, 2:] == 0.0) and np.allclose(w[0].sum(-1), 1.0)
    assert np.all(w[1] == 0.0) and np.isfinite(w).all()


def test_causal_attention_never_looks_ahead(rng):
    layer = _mha(rng)
    x = rng.standard_normal((B, TK, D))
    layer.forward(x, x, x, causal=True)
    upper = np.triu(np.ones((TK, TK), dtype=bool), k=1)
    assert np.all(layer.weights[..., upper] == 0.0)


def test_the_layers_equal_torch_with_shared_weights(rng):
    torch = pytest.importorskip("torch")
    norm = LayerNorm(rng.standard_normal(D), rng.standard_normal(D))
    mha = _mha(rng)
    t_norm = torch.nn.LayerNorm(D).double()
    t_mha = torch.nn.MultiheadAttention(D, HEADS, batch_first=True).double()
    with torch.no_grad():
        t_norm.weight.copy_(torch.from_numpy(norm.params[0]))
        t_norm.bias.copy_(torch.from_numpy(norm.params[1]))
        t_mha.in_proj_weight.copy_(torch.from_numpy(mha.params[0]))
        t_mha.in_proj_bias.copy_(torch.from_numpy(mha.params[1]))
        t_mha.out_proj.weight.copy_(torch.from_numpy(mha.params[2]))
        t_mha.out_proj.bias.copy_(torch.from_numpy(mha.params[3]))
    query, key = rng.standard_normal((B, TQ, D)), rng.standard_normal((B, TK, D))
    r = rng.standard_normal((B, TQ, D))

    # The NumPy side: layer norm of the query, then attention over the keys (keys = values).
    normed = norm.forward(query)
    out = mha.forward(normed, key, key, MASK)
    dnormed, dkey, dvalue = mha.backward(r)
    dquery = norm.backward(dnormed)

    tq = torch.from_numpy(query).requires_grad_()
    tk = torch.from_numpy(key).requires_grad_()
    t_out, t_weights = t_mha(t_norm(tq), tk, tk, key_padding_mask=torch.from_numpy(~MASK), need_weights=True,
                             average_attn_weights=False)
    (t_out * torch.from_numpy(r)).sum().backward()

    assert rel_error(out, t_out.detach().numpy()) < 1e-10
    assert rel_error(mha.weights, t_weights.detach().numpy()) < 1e-10  # every head's, (batch, heads, tgt, src)
    assert rel_error(dquery, tq.grad.numpy()) < 1e-10
    assert rel_error(dkey + dvalue, tk.grad.numpy()) < 1e-10
    for mine, theirs in zip(mha.grads, [t_mha.in_proj_weight, t_mha.in_proj_bias, t_mha.out_proj.weight,
                                        t_mha.out_proj.bias]):
        assert rel_error(mine, theirs.grad.numpy()) < 1e-10
    assert rel_error(norm.grads[0], t_norm.weight.grad.numpy()) < 1e-10
    assert rel_error(norm.grads[1], t_norm.bias.grad.numpy()) < 1e-10


def test_a_head_count_that_does_not_divide_d_model_is_refused(rng):
    with pytest.raises(ValueError, match="not divisible by 3 heads"):
        MultiHeadAttention(np.zeros((3 * D, D)), np.zeros(3 * D), np.zeros((D, D)), np.zeros(D), 3)
