"""Every scratch layer's backward equals central differences in float64.

Each check projects the layer's output onto fixed random weights R (f = sum(out * R), so
dout = R) and compares the analytic gradient of every input and parameter with the central
difference, by `heed.scratch.gradcheck.rel_error` (max elementwise relative error with a floor
at 1e-3 of the array's largest entry); the bound is 1e-6.
"""
from __future__ import annotations

import numpy as np
import pytest

from heed.scratch import (
    LSTM,
    Affine,
    Attention,
    AttentionWeight,
    Embedding,
    Softmax,
    SoftmaxWithLoss,
    Tanh,
    TimeAffine,
    TimeAttention,
    TimeEmbedding,
    TimeLSTM,
    WeightSum,
)
from heed.scratch.gradcheck import check_gradients, numerical_gradient, rel_error

TOL = 1e-6
B, S, T, D, H = 3, 5, 4, 3, 4


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape)


def projections(rng, outputs):
    """Fixed random R per output; f = sum_k sum(out_k * R_k)."""
    return [rand(rng, *np.shape(o)) for o in outputs]


def assert_all_close(errors: dict[str, float]) -> None:
    bad = {k: v for k, v in errors.items() if not v <= TOL}
    assert not bad, f"relative errors above {TOL}: {bad}"


def layer_params(layer) -> dict[str, np.ndarray]:
    return {f"param{k}": p for k, p in enumerate(layer.params)}


def layer_grads(layer) -> dict[str, np.ndarray]:
    return {f"param{k}": g.copy() for k, g in enumerate(layer.grads)}


def src_mask() -> np.ndarray:
    """bool (B, S): lengths 5, 2, 0 (one all-padding row)."""
    return np.arange(S)[None, :] < np.array([5, 2, 0])[:, None]


def test_rel_error_is_zero_for_equal_arrays_and_sees_a_wrong_entry():
    a = np.array([1.0, -2.0, 3e-9])
    assert rel_error(a, a) == 0.0
    assert rel_error(a, a * (1 + 1e-3)) == pytest.approx(1e-3 / (2 + 1e-3), rel=1e-6)


def test_numerical_gradient_of_a_known_function():
    x = np.array([0.3, -1.2, 2.0])
    g = numerical_gradient(lambda: float((x ** 3).sum()), x)
    assert rel_error(g, 3 * x ** 2) < 1e-9


def test_affine_with_and_without_bias(rng):
    for bias in (True, False):
        layer = Affine(rand(rng, H, D), rand(rng, H) if bias else None)
        x = rand(rng, B, D)
        (R,) = projections(rng, [np.zeros((B, H))])
        f = lambda layer=layer, x=x, R=R: float((layer.forward(x) * R).sum())
        f()
        dx = layer.backward(R)
        assert_all_close(check_gradients(f, {"x": x, **layer_params(layer)}, {"x": dx, **layer_grads(layer)}))


def test_time_affine(rng):
    layer = TimeAffine(rand(rng, H, D), rand(rng, H))
    x = rand(rng, B, T, D)
    (R,) = projections(rng, [np.zeros((B, T, H))])
    f = lambda: float((layer.forward(x) * R).sum())
    f()
    dx = layer.backward(R)
    assert_all_close(check_gradients(f, {"x": x, **layer_params(layer)}, {"x": dx, **layer_grads(layer)}))


@pytest.mark.parametrize("cls, ids_shape", [(Embedding, (B,)), (TimeEmbedding, (B, T))])
def test_embedding_adds_repeated_ids_and_skips_padding_row(rng, cls, ids_shape):
    layer = cls(rand(rng, 6, D), padding_idx=0)
    ids = rng.integers(0, 6, ids_shape)
    ids.flat[0], ids.flat[1] = 0, 4
    ids.flat[2] = 4  # a repeated id
    (R,) = projections(rng, [np.zeros(ids_shape + (D,))])
    f = lambda: float((layer.forward(ids) * R).sum())
    f()
    layer.backward(R)
    numeric = numerical_gradient(f, layer.params[0])
    numeric[0] = 0.0  # torch's padding_idx: the padding row gets no gradient
    assert rel_error(layer.grads[0], numeric) <= TOL
    assert np.all(layer.grads[0][0] == 0.0)


@pytest.mark.parametrize("cls", [Tanh, Softmax])
def test_elementwise_layers(rng, cls):
    layer = cls()
    x = rand(rng, B, T, D)
    (R,) = projections(rng, [x])
    f = lambda: float((layer.forward(x) * R).sum())
    f()
    dx = layer.backward(R)
    assert_all_close(check_gradients(f, {"x": x}, {"x": dx}))


def test_softmax_with_loss_ignores_padding_targets(rng):
    layer = SoftmaxWithLoss(ignore_index=0)
    logits = rand(rng, B, T, 5)
    targets = rng.integers(1, 5, (B, T))
    targets[0, 2:] = 0
    targets[2, :] = 0
    f = lambda: 2.5 * layer.forward(logits, targets)
    f()
    dlogits = layer.backward(2.5)
    assert_all_close(check_gradients(f, {"logits": logits}, {"logits": dlogits}))
    assert np.all(dlogits[2] == 0.0) and np.all(dlogits[0, 2:] == 0.0)


def test_lstm_step(rng):
    layer = LSTM(rand(rng, 4 * H, D), rand(rng, 4 * H, H), rand(rng, 4 * H))
    x, h, c = rand(rng, B, D), rand(rng, B, H), rand(rng, B, H)
    Rh, Rc = projections(rng, [h, c])

    def f() -> float:
        h_next, c_next = layer.forward(x, h, c)
        return float((h_next * Rh).sum() + (c_next * Rc).sum())

    f()
    dx, dh, dc = layer.backward(Rh, Rc)
    assert_all_close(check_gradients(f, {"x": x, "h": h, "c": c, **layer_params(layer)},
                                     {"x": dx, "h": dh, "c": dc, **layer_grads(layer)}))


@pytest.mark.parametrize("masked", [False, True])
def test_time_lstm_with_initial_and_final_state(rng, masked):
    layer = TimeLSTM(rand(rng, 4 * H, D) * 0.5, rand(rng, 4 * H, H) * 0.5, rand(rng, 4 * H))
    xs, h0, c0 = rand(rng, B, T, D), rand(rng, B, H), rand(rng, B, H)
    mask = (np.arange(T)[None, :] < np.array([4, 2, 1])[:, None]) if masked else None
    Rs, Rh, Rc = projections(rng, [np.zeros((B, T, H)), h0, c0])

    def f() -> float:
        hs = layer.forward(xs, h0, c0, mask=mask)
        return float((hs * Rs).sum() + (layer.h * Rh).sum() + (layer.c * Rc).sum())

    f()
    dxs = layer.backward(Rs, Rh, Rc)
    assert_all_close(check_gradients(f, {"xs": xs, "h0": h0, "c0": c0, **layer_params(layer)},
                                     {"xs": dxs, "h0": layer.dh0, "c0": layer.dc0, **layer_grads(layer)}))


def test_weight_sum(rng):
    layer = WeightSum()
    values, weights = rand(rng, B, S, H), rand(rng, B, S)
    (R,) = projections(rng, [np.zeros((B, H))])
    f = lambda: float((layer.forward(values, weights) * R).sum())
    f()
    dvalues, dweights = layer.backward(R)
    assert_all_close(check_gradients(f, {"values": values, "weights": weights},
                                     {"values": dvalues, "weights": dweights}))


@pytest.mark.parametrize("masked", [False, True])
def test_attention_weight(rng, masked):
    layer = AttentionWeight()
    query, keys = rand(rng, B, H), rand(rng, B, S, H)
    mask = src_mask() if masked else None
    (R,) = projections(rng, [np.zeros((B, S))])
    f = lambda: float((layer.forward(query, keys, mask) * R).sum())
    f()
    dquery, dkeys = layer.backward(R)
    assert_all_close(check_gradients(f, {"query": query, "keys": keys}, {"query": dquery, "keys": dkeys}))


@pytest.mark.parametrize("masked", [False, True])
def test_attention_one_step(rng, masked):
    layer = Attention()
    query, keys, values = rand(rng, B, H), rand(rng, B, S, H), rand(rng, B, S, H)
    mask = src_mask() if masked else None
    (R,) = projections(rng, [np.zeros((B, H))])
    f = lambda: float((layer.forward(query, keys, values, mask) * R).sum())
    f()
    grads = dict(zip(("query", "keys", "values"), layer.backward(R)))
    assert_all_close(check_gradients(f, {"query": query, "keys": keys, "values": values}, grads))


@pytest.mark.parametrize("masked", [False, True])
def test_time_attention(rng, masked):
    layer = TimeAttention()
    queries, keys, values = rand(rng, B, T, H), rand(rng, B, S, H), rand(rng, B, S, H)
    mask = src_mask() if masked else None
    (R,) = projections(rng, [np.zeros((B, T, H))])
    f = lambda: float((layer.forward(queries, keys, values, mask) * R).sum())
    f()
    grads = dict(zip(("queries", "keys", "values"), layer.backward(R)))
    assert_all_close(check_gradients(f, {"queries": queries, "keys": keys, "values": values}, grads))


def test_time_attention_equals_one_step_attention_at_every_step(rng):
    queries, keys, values = rand(rng, B, T, H), rand(rng, B, S, H), rand(rng, B, S, H)
    mask = src_mask()
    many, one = TimeAttention(), Attention()
    contexts = many.forward(queries, keys, values, mask)
    for t in range(T):
        np.testing.assert_allclose(one.forward(queries[:, t], keys, values, mask), contexts[:, t], rtol=1e-12)
        np.testing.assert_allclose(one.weights, many.weights[:, t], rtol=1e-12)


@pytest.mark.parametrize("score", ["dot", "general", "additive"])
def test_whole_model_gradients_match_central_differences(score):
    from heed.scratch import AttentionSeq2seq

    model = AttentionSeq2seq(7, 6, embed_size=3, hidden_size=4, score=score, dtype=np.float64, rng=1)
    # N(0, 1) weights rather than torch's small init: with those, some gradients (W_a's ~1e-5) sit
    # near the finite differences' own rounding error (~1e-16 * loss / eps), not a test of backward.
    rng = np.random.default_rng(2)
    for p in model.params:
        p[...] = rng.standard_normal(p.shape)
    src = np.array([[4, 5, 6, 2], [3, 2, 0, 0], [0, 0, 0, 0]])
    src_lengths = np.array([4, 2, 0])
    tgt_in = np.array([[1, 4, 5], [1, 3, 0], [1, 0, 0]])
    tgt_out = np.array([[4, 5, 2], [3, 2, 0], [2, 0, 0]])
    f = lambda: model.forward(src, src_lengths, tgt_in, tgt_out)
    f()
    model.backward()
    analytic = {name: g.copy() for name, g in model.named_grads().items()}
    numeric = {name: numerical_gradient(f, p) for name, p in model.named_params().items()}
    for name in ("encoder.embedding.weight", "decoder.embedding.weight"):
        numeric[name][0] = 0.0  # the padding row gets no gradient (torch's padding_idx)
    errors = {name: rel_error(analytic[name], numeric[name]) for name in analytic}
    assert_all_close(errors)
