"""The NumPy additive (Bahdanau) score: score = v . tanh(W_q q + b_q + W_k k) (Bahdanau et al. 2015, A.1.2).

Its backward equals central differences in float64 (every parameter, the query and the keys, for a
one-step and an all-steps query, with and without a mask); padding gets weight exactly 0 and its
keys exactly zero gradient; and with weights shared it computes what heed.nn's
`Attention("additive")` computes: scores, weights, context and every gradient.
Sizes differ on purpose (query 4, key 3, attention 5) so a transposed weight cannot pass.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from heed.nn.rnn.attention import Attention as TorchAttention
from heed.scratch import AdditiveAttention, AdditiveScore, TimeAffine
from heed.scratch.gradcheck import check_gradients, rel_error

TOL = 1e-6
B, S, T, Q, K, A, V = 3, 5, 4, 4, 3, 5, 2  # batch, src_len, tgt_len, query, key, attention, value sizes


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape)


def src_mask() -> np.ndarray:
    """bool (B, S), True = real token: lengths 5, 2, 0 (one all-padding row)."""
    return np.arange(S)[None, :] < np.array([5, 2, 0])[:, None]


def query_shape(one_step: bool) -> tuple[int, ...]:
    return (B, Q) if one_step else (B, T, Q)


def weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """torch's names and layouts: key_proj (attn, key), query_proj (attn, query) + bias, v (1, attn)."""
    return {"key_proj.weight": rand(rng, A, K), "query_proj.weight": rand(rng, A, Q),
            "query_proj.bias": rand(rng, A), "v.weight": rand(rng, 1, A)}


def assert_all_close(errors: dict[str, float]) -> None:
    bad = {k: v for k, v in errors.items() if not v <= TOL}
    assert not bad, f"relative errors above {TOL}: {bad}"


@pytest.mark.parametrize("one_step", [True, False])
def test_additive_score_backward_matches_central_differences(rng, one_step):
    layer = AdditiveScore(rand(rng, A, Q), rand(rng, A), rand(rng, 1, A))
    query, keys = rand(rng, *query_shape(one_step)), rand(rng, B, S, A)
    R = rand(rng, *query_shape(one_step)[:-1], S)  # f = sum(scores * R), so dscores = R
    f = lambda: float((layer.forward(query, keys) * R).sum())
    f()
    dquery, dkeys = layer.backward(R)
    names = ("W_q", "b_q", "v")
    assert_all_close(check_gradients(
        f, {"query": query, "keys": keys, **dict(zip(names, layer.params))},
        {"query": dquery, "keys": dkeys, **{n: g.copy() for n, g in zip(names, layer.grads)}}))


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("one_step", [True, False])
def test_additive_attention_with_key_projection_matches_central_differences(rng, one_step, masked):
    """W_k states (projected once per source), the score, masked_softmax and the weighted sum:
    gradients of W_k, W_q, b_q, v, the query, the states (the keys before W_k) and the values."""
    w = weights(rng)
    key_proj = TimeAffine(w["key_proj.weight"])
    layer = AdditiveAttention(w["query_proj.weight"], w["query_proj.bias"], w["v.weight"])
    query, states, values = rand(rng, *query_shape(one_step)), rand(rng, B, S, K), rand(rng, B, S, V)
    mask = src_mask() if masked else None
    R = rand(rng, *query_shape(one_step)[:-1], V)

    def f() -> float:
        return float((layer.forward(query, key_proj.forward(states), values, mask) * R).sum())

    f()
    dquery, dkeys, dvalues = layer.backward(R)
    dstates = key_proj.backward(dkeys)
    analytic = {"query": dquery, "states": dstates, "values": dvalues, "key_proj.weight": key_proj.grads[0].copy(),
                **{n: g.copy() for n, g in zip(("query_proj.weight", "query_proj.bias", "v.weight"), layer.grads)}}
    assert_all_close(check_gradients(f, {"query": query, "states": states, "values": values, **w}, analytic))


@pytest.mark.parametrize("one_step", [True, False])
def test_padding_gets_zero_weight_and_its_keys_zero_gradient(rng, one_step):
    w = weights(rng)
    layer = AdditiveAttention(w["query_proj.weight"], w["query_proj.bias"], w["v.weight"])
    query, keys, values = rand(rng, *query_shape(one_step)), rand(rng, B, S, A), rand(rng, B, S, V)
    mask = src_mask()
    layer.forward(query, keys, values, mask)
    weights_ = layer.weights if not one_step else layer.weights[:, None, :]  # (batch, tgt_len, src_len)
    padding = np.broadcast_to(~mask[:, None, :], weights_.shape)
    assert np.all(weights_[padding] == 0.0)
    np.testing.assert_allclose(weights_[:2].sum(axis=-1), 1.0, rtol=1e-12)  # rows with real tokens
    assert np.all(weights_[2] == 0.0)  # the all-padding row: zeros, not NaN, not uniform
    _, dkeys, dvalues = layer.backward(rand(rng, *query_shape(one_step)[:-1], V))
    assert np.all(dkeys[~mask] == 0.0) and np.all(dvalues[~mask] == 0.0)
    # ... so changing keys and values under padding changes nothing.
    keys2, values2 = keys.copy(), values.copy()
    keys2[~mask], values2[~mask] = 1e3, -1e3
    before = layer.forward(query, keys, values, mask)
    np.testing.assert_array_equal(layer.forward(query, keys2, values2, mask), before)


def test_one_step_equals_all_steps_at_every_step(rng):
    w = weights(rng)
    many = AdditiveAttention(w["query_proj.weight"], w["query_proj.bias"], w["v.weight"])
    one = AdditiveAttention(w["query_proj.weight"], w["query_proj.bias"], w["v.weight"])
    queries, keys, values = rand(rng, B, T, Q), rand(rng, B, S, A), rand(rng, B, S, V)
    contexts = many.forward(queries, keys, values, src_mask())
    for t in range(T):
        np.testing.assert_allclose(one.forward(queries[:, t], keys, values, src_mask()), contexts[:, t], rtol=1e-12)
        np.testing.assert_allclose(one.weights, many.weights[:, t], rtol=1e-12)


def torch_additive(w: dict[str, np.ndarray]) -> TorchAttention:
    attention = TorchAttention("additive", query_size=Q, key_size=K, hidden_size=A).double()
    assert {n: tuple(p.shape) for n, p in attention.named_parameters()} == {n: a.shape for n, a in w.items()}
    with torch.no_grad():
        for name, p in attention.named_parameters():
            p.copy_(torch.from_numpy(w[name]))  # the same layout: no transpose, no permutation
    return attention


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("one_step", [True, False])
def test_forward_and_gradients_equal_torch_additive_attention(rng, one_step, masked):
    w = weights(rng)
    key_proj = TimeAffine(w["key_proj.weight"].copy())
    layer = AdditiveAttention(w["query_proj.weight"].copy(), w["query_proj.bias"].copy(), w["v.weight"].copy())
    query, states, values = rand(rng, *query_shape(one_step)), rand(rng, B, S, K), rand(rng, B, S, V)
    mask = src_mask() if masked else None
    R = rand(rng, *query_shape(one_step)[:-1], V)

    keys = key_proj.forward(states)
    context = layer.forward(query, keys, values, mask)
    dquery, dkeys, dvalues = layer.backward(R)
    dstates = key_proj.backward(dkeys)

    twin = torch_additive(w)
    tq, ts, tv = (torch.from_numpy(x).requires_grad_() for x in (query, states, values))
    tkeys = twin.project_keys(ts)
    out = twin(tq, tkeys, tv, None if mask is None else torch.from_numpy(mask))
    (out.context * torch.from_numpy(R)).sum().backward()

    np.testing.assert_allclose(keys, tkeys.detach().numpy(), rtol=1e-12, atol=1e-12)
    tscores = twin.scores(tq if not one_step else tq.unsqueeze(1), tkeys).detach().numpy()
    scores = layer.score.forward(query, keys)  # the score alone, before the mask
    np.testing.assert_allclose(scores, tscores[:, 0] if one_step else tscores, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(layer.weights, out.weights.detach().numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(context, out.context.detach().numpy(), rtol=1e-12, atol=1e-13)
    ours = {"query": dquery, "states": dstates, "values": dvalues, "key_proj.weight": key_proj.grads[0],
            **dict(zip(("query_proj.weight", "query_proj.bias", "v.weight"), layer.grads))}
    theirs = {"query": tq.grad, "states": ts.grad, "values": tv.grad,
              **{n: p.grad for n, p in twin.named_parameters()}}
    assert_all_close({n: rel_error(g, theirs[n].numpy()) for n, g in ours.items()})


def test_model_with_a_different_attention_size_equals_its_torch_twin_and_round_trips():
    """attention_hidden 7 != hidden 6: the bridge reads it from torch's v_a and builds the twin with it."""
    from heed.scratch import AttentionSeq2seq
    from heed.scratch.bridge import scratch_to_torch, torch_to_scratch

    model = AttentionSeq2seq(9, 8, embed_size=5, hidden_size=6, score="additive", attention_hidden=7,
                             dtype=np.float64, rng=3)
    assert model.named_params()["decoder.attention.v.weight"].shape == (1, 7)
    src = np.array([[4, 5, 6, 3], [3, 7, 0, 0], [0, 0, 0, 0]])
    src_lengths = np.array([4, 2, 0])
    tgt_in = np.array([[1, 4, 5], [1, 3, 0], [1, 0, 0]])
    tgt_out = np.array([[4, 5, 2], [3, 2, 0], [2, 0, 0]])
    twin = scratch_to_torch(model)
    assert twin.decoder.attention.score == "additive" and twin.decoder.attention.v.in_features == 7
    with torch.no_grad():
        out = twin(torch.from_numpy(src), torch.from_numpy(src_lengths), torch.from_numpy(tgt_in))
    np.testing.assert_allclose(model.logits(src, src_lengths, tgt_in), out.logits.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(model.decoder.attention.weights, out.attention.numpy(), rtol=0, atol=1e-13)
    again = torch_to_scratch(twin)
    assert again.attention_hidden == 7
    for name, value in model.named_params().items():
        np.testing.assert_allclose(again.named_params()[name], value, rtol=0, atol=1e-15)
    assert np.isfinite(model.forward(src, src_lengths, tgt_in, tgt_out))


def test_attention_hidden_is_only_for_the_additive_score():
    from heed.scratch import AttentionSeq2seq

    with pytest.raises(ValueError, match="attention_hidden"):
        AttentionSeq2seq(9, 8, embed_size=5, hidden_size=6, score="general", attention_hidden=7)
