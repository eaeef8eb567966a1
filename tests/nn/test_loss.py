"""generator_loss: the chunked generator + cross-entropy equals F.cross_entropy(generator(f)) in
value and gradients, with padding, label smoothing, several chunks, bf16 autocast, no tokens."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import heed.nn.loss as loss_module
from heed.nn.loss import generator_loss

PAD = 0


def reference(features, generator, target, eps):
    logits = generator(features)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16 -> float32, float64 stays
    return F.cross_entropy(logits.reshape(-1, generator.out_features), target.reshape(-1),
                           ignore_index=PAD, label_smoothing=eps, reduction="sum")


def make(dtype=torch.float64, bias=True, vocab=11):
    generator = nn.Linear(6, vocab, bias=bias).to(dtype)
    features = torch.randn(3, 5, 6, dtype=dtype, requires_grad=True)  # (batch, tgt_len, F)
    target = torch.randint(1, vocab, (3, 5))
    target[0, 3:] = PAD  # padding rows: no loss, no gradient
    target[2, 1:] = PAD
    return features, generator, target


def grads(loss, features, generator):
    params = [features, *generator.parameters()]
    return torch.autograd.grad(loss * 1.7, params)  # a non-unit upstream gradient


@pytest.fixture(autouse=True)
def chunked(monkeypatch) -> list[int]:
    """Chunks of 4 rows (the 9 target tokens of `make` in 3 chunks, the last one short) and a
    record of the rows of every fused call; a test can set another size."""
    monkeypatch.setattr(loss_module, "CHUNK_BYTES", 4 * 11 * 4)
    calls: list[int] = []
    fused = loss_module._GeneratorCrossEntropy.apply
    monkeypatch.setattr(loss_module._GeneratorCrossEntropy, "apply", lambda f, *a: calls.append(f.size(0)) or fused(f, *a))
    return calls


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows_per_chunk", [4, 1])
def test_value_and_gradients_equal_cross_entropy_of_the_logits(monkeypatch, chunked, eps, bias,
                                                               rows_per_chunk) -> None:
    monkeypatch.setattr(loss_module, "CHUNK_BYTES", 4 * 11 * rows_per_chunk)
    features, generator, target = make(bias=bias)
    want = reference(features, generator, target, eps)
    got = generator_loss(features, generator, target, ignore_index=PAD, label_smoothing=eps)
    assert chunked == [9]  # the fused pass ran, over the target tokens only
    assert got.dtype == torch.float64 and got.shape == ()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    got_grads = grads(got, features, generator)
    for g, w in zip(got_grads, grads(want, features, generator)):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
    assert torch.equal(got_grads[0][2, 1:], torch.zeros(4, 6, dtype=torch.float64))


def test_a_second_backward_through_the_same_graph_is_refused() -> None:
    """The backward turns the saved logits into their gradient in place: autograd's version check
    must catch a retained graph being replayed rather than give wrong gradients."""
    features, generator, target = make()
    loss = generator_loss(features, generator, target, ignore_index=PAD)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.cpu_bf16
def test_bf16_autocast_runs_the_products_in_bf16_and_stays_close() -> None:
    features, generator, target = make(dtype=torch.float32, vocab=50)
    want = reference(features, generator, target, 0.1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = generator_loss(features, generator, target, ignore_index=PAD, label_smoothing=0.1)
        bf16_ref = reference(features, generator, target, 0.1)
    assert got.dtype == torch.float32
    assert got.item() != pytest.approx(want.item(), abs=1e-6)  # the products really ran in bf16
    torch.testing.assert_close(got, bf16_ref, rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    for g, w in zip(grads(got, features, generator), grads(want, features, generator)):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g, w, rtol=0.05, atol=0.02)


def test_no_target_tokens_gives_zero_loss_and_zero_gradients() -> None:
    features, generator, _ = make()
    target = torch.full((3, 5), PAD)
    loss = generator_loss(features, generator, target, ignore_index=PAD, label_smoothing=0.1)
    assert loss.item() == 0.0
    assert all(torch.equal(g, torch.zeros_like(g)) for g in grads(loss, features, generator))


def test_it_evaluates_without_a_graph_in_inference_mode(chunked) -> None:
    features, generator, target = make()
    with torch.inference_mode():
        got = generator_loss(features.detach(), generator, target, ignore_index=PAD)
        assert chunked == [9]
        torch.testing.assert_close(got, reference(features.detach(), generator, target, 0.0), rtol=1e-12, atol=0)


def test_logits_that_fit_one_chunk_take_the_plain_computation(monkeypatch, chunked) -> None:
    monkeypatch.setattr(loss_module, "CHUNK_BYTES", 4 * 11 * 15)  # all 15 rows of `make` fit
    features, generator, target = make()
    got = generator_loss(features, generator, target, ignore_index=PAD, label_smoothing=0.1)
    assert chunked == []
    torch.testing.assert_close(got, reference(features, generator, target, 0.1), rtol=0, atol=0)
