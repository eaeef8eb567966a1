"""lengths_to_mask and masked_softmax: the one place where padding meets the softmax."""
from __future__ import annotations

import math

import pytest
import torch

from heed.nn.masks import lengths_to_mask, masked_softmax

LOW_PRECISION = [torch.float32, torch.float16, torch.bfloat16]


def test_lengths_to_mask_marks_real_tokens_true() -> None:
    mask = lengths_to_mask(torch.tensor([3, 1, 0]), max_len=4)
    assert mask.dtype == torch.bool
    assert mask.tolist() == [
        [True, True, True, False],
        [True, False, False, False],
        [False, False, False, False],
    ]


def test_lengths_to_mask_defaults_to_longest_length() -> None:
    assert lengths_to_mask(torch.tensor([2, 5])).shape == (2, 5)


def test_masked_softmax_without_mask_is_plain_softmax() -> None:
    scores = torch.randn(2, 3, 4, dtype=torch.float64)
    torch.testing.assert_close(masked_softmax(scores, None), torch.softmax(scores, dim=-1))


def test_masked_softmax_renormalises_over_real_tokens_only() -> None:
    # Scores 0, ln 2, ln 3 on real tokens -> exp 1, 2, 3 -> weights 1/6, 2/6, 3/6; the padded
    # position scores highest and must still get exactly 0.
    scores = torch.tensor([[0.0, math.log(2), math.log(3), 100.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, False]])
    weights = masked_softmax(scores, mask)
    torch.testing.assert_close(weights, torch.tensor([[1 / 6, 2 / 6, 3 / 6, 0.0]], dtype=torch.float64))
    assert weights[0, 3].item() == 0.0


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_minus_inf_never_produces_nan(dtype: torch.dtype) -> None:
    # Row 0: -inf already sits on a padded position and on one real token (that token just gets 0).
    # Row 1: all padding, scores include -inf: a naive `masked_fill(-inf); softmax` gives NaN here.
    scores = torch.tensor([[1.0, float("-inf"), 0.0, float("-inf")],
                           [float("-inf"), float("-inf"), 2.0, 3.0]], dtype=dtype)
    mask = torch.tensor([[True, True, True, False], [False, False, False, False]])
    weights = masked_softmax(scores, mask)
    assert not weights.isnan().any()
    e = math.e
    expected_row0 = torch.tensor([e / (e + 1), 0.0, 1 / (e + 1), 0.0])
    torch.testing.assert_close(weights[0].float(), expected_row0, atol=1e-2, rtol=1e-2)
    assert weights[0, 1].item() == 0.0 and weights[0, 3].item() == 0.0
    assert torch.equal(weights[1], torch.zeros(4, dtype=dtype))


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_all_padding_row_gets_zero_weights_not_uniform(dtype: torch.dtype) -> None:
    # -1e9 instead of -inf would give 1/4 each here; heed gives exactly 0.
    weights = masked_softmax(torch.randn(1, 4).to(dtype), torch.zeros(1, 4, dtype=torch.bool))
    assert torch.equal(weights, torch.zeros(1, 4, dtype=dtype))


def test_fp16_large_scores_do_not_overflow() -> None:
    # Scores near fp16's limit (65504): exp() of them overflows, so the softmax must subtract the row
    # max first. Padding is filled with fp16's lowest value (a -1e9 fill does not fit in fp16:
    # masked_fill raises), and a padded score at the fp16 maximum must still get 0.
    scores = torch.tensor([[60000.0, 59999.0, -60000.0, 65504.0],
                           [65504.0, 65504.0, 65504.0, 65504.0]], dtype=torch.float16)
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    weights = masked_softmax(scores, mask)
    assert torch.isfinite(weights).all()
    # fp16 spacing at 60000 is 32, so 59999 rounds to 60000: two equal top scores -> 1/2, 1/2.
    expected = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float16)
    assert torch.equal(weights, expected)


def test_padding_weights_are_those_of_a_minus_inf_fill_bit_for_bit() -> None:
    scores = torch.randn(4, 3, 9) * 20
    mask = lengths_to_mask(torch.tensor([9, 5, 1, 3]), max_len=9).unsqueeze(1)  # (4, 1, 9)
    reference = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # no all-padding row here
    assert torch.equal(masked_softmax(scores, mask), reference)


def test_a_row_whose_real_scores_are_all_minus_inf_gets_zeros_not_nan() -> None:
    scores = torch.tensor([[float("-inf"), float("-inf"), 1.0]])
    weights = masked_softmax(scores, torch.tensor([[True, True, False]]))
    assert torch.equal(weights, torch.zeros(1, 3))


def test_gradient_through_all_padding_row_is_zero_not_nan() -> None:
    scores = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    mask = lengths_to_mask(torch.tensor([5, 2, 0]), max_len=5)
    weights = masked_softmax(scores, mask)
    (weights * torch.randn(3, 5, dtype=torch.float64)).sum().backward()
    grad = scores.grad
    assert torch.isfinite(grad).all()
    assert torch.equal(grad[2], torch.zeros(5, dtype=torch.float64))  # all padding
    assert torch.equal(grad[1, 2:], torch.zeros(3, dtype=torch.float64))  # padded positions
    assert grad[0].abs().sum() > 0  # real rows still learn


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_gradient_through_all_padding_row_is_zero(dtype: torch.dtype) -> None:
    scores = torch.randn(2, 4).to(dtype).requires_grad_()
    mask = torch.tensor([[True, True, False, False], [False, False, False, False]])
    masked_softmax(scores, mask).float().pow(2).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.equal(scores.grad[1], torch.zeros(4, dtype=dtype))
