"""Masks: padding gets exactly zero weight, an all-padding row gives zeros (no NaN), what lies
under padding changes nothing, and a masked TimeLSTM carries its state over padded steps."""
from __future__ import annotations

import numpy as np

from heed.scratch import TimeAttention, TimeLSTM, lengths_to_mask, masked_softmax

B, S, T, H = 3, 5, 4, 6


def inputs(rng: np.random.Generator):
    return rng.standard_normal((B, T, H)), rng.standard_normal((B, S, H)), rng.standard_normal((B, S, H))


def test_lengths_to_mask_is_true_on_real_tokens():
    np.testing.assert_array_equal(lengths_to_mask(np.array([2, 0, 3]), 4),
                                  [[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0]])


def test_masked_softmax_zero_on_padding_rows_sum_to_one_all_padding_row_is_zero():
    scores = np.array([[1.0, 2.0, 50.0], [3.0, -1.0, 0.5], [1e4, -1e4, 7.0]], np.float32)
    mask = np.array([[True, True, False], [False, False, False], [True, False, True]])
    weights = masked_softmax(scores, mask)
    assert weights.dtype == np.float32
    assert not np.isnan(weights).any()
    assert np.all(weights[~mask] == 0.0)
    np.testing.assert_allclose(weights.sum(-1), [1.0, 0.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(weights[0, :2], np.exp([1.0, 2.0]) / np.exp([1.0, 2.0]).sum(), rtol=1e-6)


def test_time_attention_padding_gets_zero_weight_and_no_gradient():
    rng = np.random.default_rng(0)
    queries, keys, values = inputs(rng)
    mask = lengths_to_mask(np.array([5, 2, 0]), S)  # the last row is all padding
    layer = TimeAttention()
    contexts = layer.forward(queries, keys, values, mask)
    assert not np.isnan(contexts).any() and not np.isnan(layer.weights).any()
    assert np.all(layer.weights[~np.broadcast_to(mask[:, None, :], layer.weights.shape)] == 0.0)
    np.testing.assert_allclose(layer.weights.sum(-1), [[1.0] * T, [1.0] * T, [0.0] * T], rtol=1e-12)
    assert np.all(contexts[2] == 0.0)
    dq, dk, dv = layer.backward(rng.standard_normal(contexts.shape))
    for grad in (dq, dk, dv):
        assert not np.isnan(grad).any()
    assert np.all(dk[~mask] == 0.0) and np.all(dv[~mask] == 0.0) and np.all(dq[2] == 0.0)


def test_values_under_padding_change_nothing():
    rng = np.random.default_rng(1)
    queries, keys, values = inputs(rng)
    mask = lengths_to_mask(np.array([5, 2, 3]), S)
    before = TimeAttention().forward(queries, keys, values, mask)
    keys[~mask], values[~mask] = 1e6, -1e6
    np.testing.assert_array_equal(TimeAttention().forward(queries, keys, values, mask), before)


def test_masked_time_lstm_equals_running_each_row_over_its_real_steps():
    rng = np.random.default_rng(2)
    D = 3
    Wx, Wh, b = rng.standard_normal((4 * H, D)), rng.standard_normal((4 * H, H)), rng.standard_normal(4 * H)
    xs, h0, c0 = rng.standard_normal((B, T, D)), rng.standard_normal((B, H)), rng.standard_normal((B, H))
    lengths = np.array([4, 1, 2])
    layer = TimeLSTM(Wx, Wh, b)
    hs = layer.forward(xs, h0, c0, mask=lengths_to_mask(lengths, T))
    for row, length in enumerate(lengths):
        alone = TimeLSTM(Wx, Wh, b)
        real = alone.forward(xs[row:row + 1, :length], h0[row:row + 1], c0[row:row + 1])
        np.testing.assert_allclose(hs[row, :length], real[0], rtol=1e-12)
        assert np.all(hs[row, length:] == 0.0)  # padded steps output zeros
        np.testing.assert_allclose(layer.h[row], alone.h[0], rtol=1e-12)  # final state = last real step's
        np.testing.assert_allclose(layer.c[row], alone.c[0], rtol=1e-12)
