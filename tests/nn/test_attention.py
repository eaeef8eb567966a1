"""Attention as a soft dictionary look-up: masking, precision, one-step vs all-steps, the fused path,
and a worked example to check by hand."""
from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from heed.nn.masks import lengths_to_mask
from heed.nn.rnn.attention import FUSABLE_SCORES, SCORES, Attended, Attention, attend

BATCH, SRC_LEN, TGT_LEN = 4, 5, 3
SIZE = 6  # query size == key size (dot, scaled_dot and cosine need it)
VALUE_SIZE = 5  # deliberately different from SIZE, so keys and values cannot be confused
LENGTHS = torch.tensor([5, 3, 1, 0])  # the last row is all padding
EMPTY_ROW = 3

# Every way heed attends: the six Attention scores and the parameter-free `attend` (local-p windows:
# tests/nn/test_attention_family.py).
ATTENDERS = [*SCORES, "attend:dot", "attend:scaled_dot"]

AttendFn = Callable[[Tensor, Tensor, Tensor, Tensor], Attended]


def make_attender(name: str, dtype: torch.dtype = torch.float64) -> tuple[AttendFn, list[Tensor]]:
    """A callable (query, raw keys, values, mask) -> Attended, and its parameters.

    Modules project their keys inside the call, so gradients reach the key projection too."""
    if name.startswith("attend:"):
        score = name.split(":")[1]
        return (lambda q, k, v, m: attend(q, k, v, m, score=score)), []
    max_positions = SRC_LEN if name == "location" else None  # W_a's rows: one per source position
    module = Attention(name, query_size=SIZE, key_size=SIZE, max_positions=max_positions).to(dtype)
    return (lambda q, k, v, m: module(q, module.project_keys(k), v, m)), list(module.parameters())


def make_inputs(dtype: torch.dtype = torch.float64, *, one_step: bool = False):
    """query (batch, [tgt_len,] size), keys (batch, src_len, size), values (batch, src_len, value_size), mask."""
    q_shape = (BATCH, SIZE) if one_step else (BATCH, TGT_LEN, SIZE)
    query = torch.randn(q_shape, dtype=torch.float64).to(dtype)
    keys = torch.randn(BATCH, SRC_LEN, SIZE, dtype=torch.float64).to(dtype)
    values = torch.randn(BATCH, SRC_LEN, VALUE_SIZE, dtype=torch.float64).to(dtype)
    return query, keys, values, lengths_to_mask(LENGTHS, SRC_LEN)


def padding_of(mask: Tensor, like: Tensor) -> Tensor:
    """~mask broadcast over the feature axis of `like` (batch, src_len, ·)."""
    return (~mask).unsqueeze(-1).expand_as(like)


# --- the worked example ---------------------------------------------------------------------------

def test_worked_example_dot_attention_by_hand() -> None:
    # Four source states, each 4-dim; they are both the keys and the values (Luong's dot score):
    #   h1 = [0,    1, 0, 0]
    #   h2 = [ln 2, 0, 1, 0]
    #   h3 = [ln 3, 0, 0, 1]
    #   h4 = [ln 4, 1, 1, 1]
    # Query q = [1, 0, 0, 0], so score_i = q . h_i = first coordinate:
    #   scores  = [0, ln 2, ln 3, ln 4]
    #   exp     = [1, 2, 3, 4], sum 10
    #   weights = [0.1, 0.2, 0.3, 0.4]
    #   context = 0.1 h1 + 0.2 h2 + 0.3 h3 + 0.4 h4
    #           = [0.2 ln 2 + 0.3 ln 3 + 0.4 ln 4,  0.1 + 0.4,  0.2 + 0.4,  0.3 + 0.4]
    #           = [ln 2 + 0.3 ln 3, 0.5, 0.6, 0.7]      (0.4 ln 4 = 0.8 ln 2)
    #           ~ [1.0227308, 0.5, 0.6, 0.7]
    ln2, ln3, ln4 = math.log(2), math.log(3), math.log(4)
    states = torch.tensor([[[0.0, 1, 0, 0], [ln2, 0, 1, 0], [ln3, 0, 0, 1], [ln4, 1, 1, 1]]],
                          dtype=torch.float64)  # (batch=1, src_len=4, hidden=4)
    query = torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64)  # (batch=1, hidden=4): one step
    mask = torch.ones(1, 4, dtype=torch.bool)

    weights_by_hand = torch.tensor([[0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    context_by_hand = torch.tensor([[ln2 + 0.3 * ln3, 0.5, 0.6, 0.7]], dtype=torch.float64)
    assert abs(ln2 + 0.3 * ln3 - 1.0227308) < 1e-7

    for result in (attend(query, states, states, mask),
                   Attention("dot", query_size=4, key_size=4)(query, states, states, mask)):
        torch.testing.assert_close(result.weights, weights_by_hand, rtol=0, atol=1e-15)
        torch.testing.assert_close(result.context, context_by_hand, rtol=0, atol=1e-15)

    # Mark h4 as padding: exp = [1, 2, 3], sum 6 -> weights [1/6, 2/6, 3/6, 0]
    # context = (h1 + 2 h2 + 3 h3) / 6 = [(2 ln 2 + 3 ln 3) / 6, 1/6, 2/6, 3/6]
    padded = attend(query, states, states, torch.tensor([[True, True, True, False]]))
    torch.testing.assert_close(padded.weights, torch.tensor([[1 / 6, 2 / 6, 3 / 6, 0.0]], dtype=torch.float64),
                               rtol=0, atol=1e-15)
    torch.testing.assert_close(padded.context,
                               torch.tensor([[(2 * ln2 + 3 * ln3) / 6, 1 / 6, 2 / 6, 3 / 6]], dtype=torch.float64),
                               rtol=0, atol=1e-15)


# --- the masking contract, for every score --------------------------------------------------------

@pytest.mark.parametrize("name", ATTENDERS)
@pytest.mark.parametrize("one_step", [False, True], ids=["all_steps", "one_step"])
def test_weights_sum_to_one_over_real_tokens_and_are_zero_on_padding(name: str, one_step: bool) -> None:
    fn, _ = make_attender(name)
    query, keys, values, mask = make_inputs(one_step=one_step)
    context, weights = fn(query, keys, values, mask)
    expected_shape = (BATCH, SRC_LEN) if one_step else (BATCH, TGT_LEN, SRC_LEN)
    assert weights.shape == expected_shape
    assert context.shape == expected_shape[:-1] + (VALUE_SIZE,)
    w = weights if not one_step else weights.unsqueeze(1)  # (batch, tgt_len, src_len)
    step_mask = mask.unsqueeze(1).expand_as(w)
    assert torch.equal(w[~step_mask], torch.zeros_like(w[~step_mask]))  # exactly 0 on padding
    assert (w[step_mask] > 0).all()
    sums = w.sum(dim=-1)  # (batch, tgt_len)
    real_rows = LENGTHS > 0
    torch.testing.assert_close(sums[real_rows], torch.ones_like(sums[real_rows]), rtol=0, atol=1e-12)
    assert torch.equal(sums[EMPTY_ROW], torch.zeros_like(sums[EMPTY_ROW]))


@pytest.mark.parametrize("name", ATTENDERS)
def test_changing_keys_or_values_under_padding_changes_nothing(name: str) -> None:
    fn, _ = make_attender(name)
    query, keys, values, mask = make_inputs()
    before = fn(query, keys, values, mask)
    # Large, different numbers under padding only (1e3: a tenfold-larger score than any real one).
    other_keys = torch.where(padding_of(mask, keys), 1e3 * torch.randn_like(keys), keys)
    other_values = torch.where(padding_of(mask, values), 1e3 * torch.randn_like(values), values)
    for k, v in ((other_keys, values), (keys, other_values), (other_keys, other_values)):
        after = fn(query, k, v, mask)
        assert torch.equal(after.weights, before.weights)
        assert torch.equal(after.context, before.context)


@pytest.mark.parametrize("name", ATTENDERS)
def test_keys_and_values_under_padding_get_no_gradient(name: str) -> None:
    fn, _ = make_attender(name)
    query, keys, values, mask = make_inputs()
    keys.requires_grad_()
    values.requires_grad_()
    context, weights = fn(query, keys, values, mask)
    (context.pow(2).sum() + (weights * torch.randn_like(weights)).sum()).backward()
    if name == "location":  # Luong's location score reads no keys at all
        assert keys.grad is None
    for t in (keys, values) if name != "location" else (values,):
        pad = padding_of(mask, t)
        assert torch.equal(t.grad[pad], torch.zeros_like(t.grad[pad]))
        assert t.grad[~pad].abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ATTENDERS)
def test_all_padding_row_gives_zero_weights_and_context_and_finite_gradient(name: str, dtype: torch.dtype) -> None:
    fn, params = make_attender(name, dtype)
    query, keys, values, mask = make_inputs(dtype)
    for t in (query, keys, values):
        t.requires_grad_()
    context, weights = fn(query, keys, values, mask)
    assert context.dtype == weights.dtype == dtype
    assert torch.isfinite(context).all() and torch.isfinite(weights).all()
    assert torch.equal(weights[EMPTY_ROW], torch.zeros_like(weights[EMPTY_ROW]))
    assert torch.equal(context[EMPTY_ROW], torch.zeros_like(context[EMPTY_ROW]))
    loss = context.float().pow(2).sum() + (weights.float() * torch.rand(weights.shape)).sum()
    loss.backward()
    for t in (query, keys, values, *params):
        if t is keys and name == "location":
            continue  # no gradient: the location score reads no keys
        assert torch.isfinite(t.grad).all(), f"non-finite gradient in {tuple(t.shape)}"
    # Nothing flows back through a row that attended to nothing.
    assert torch.equal(query.grad[EMPTY_ROW], torch.zeros_like(query.grad[EMPTY_ROW]))


@pytest.mark.parametrize("name", ATTENDERS)
def test_one_step_calls_agree_with_the_all_steps_call(name: str) -> None:
    fn, _ = make_attender(name)
    query, keys, values, mask = make_inputs()  # query (batch, tgt_len, size)
    all_steps = fn(query, keys, values, mask)
    for t in range(TGT_LEN):
        one = fn(query[:, t], keys, values, mask)  # (batch, size)
        assert one.context.shape == (BATCH, VALUE_SIZE) and one.weights.shape == (BATCH, SRC_LEN)
        torch.testing.assert_close(one.context, all_steps.context[:, t], rtol=0, atol=1e-12)
        torch.testing.assert_close(one.weights, all_steps.weights[:, t], rtol=0, atol=1e-12)


@pytest.mark.parametrize("score", ["dot", "scaled_dot"])
def test_attend_function_equals_the_attention_module(score: str) -> None:
    query, keys, values, mask = make_inputs()
    module = Attention(score, query_size=SIZE, key_size=SIZE)
    by_module = module(query, module.project_keys(keys), values, mask)
    by_function = attend(query, keys, values, mask, score=score)
    assert torch.equal(by_function.weights, by_module.weights)
    assert torch.equal(by_function.context, by_module.context)


def test_scaled_dot_divides_dot_scores_by_sqrt_of_key_size() -> None:
    # With scores s, scaled_dot is dot applied to s / sqrt(d): scaling the query by 1/sqrt(d) matches.
    query, keys, values, mask = make_inputs()
    scaled = attend(query, keys, values, mask, score="scaled_dot")
    dot_of_scaled_query = attend(query / math.sqrt(SIZE), keys, values, mask, score="dot")
    torch.testing.assert_close(scaled.weights, dot_of_scaled_query.weights, rtol=0, atol=1e-12)


def test_cosine_score_ignores_key_and_query_length() -> None:
    module = Attention("cosine", query_size=SIZE, key_size=SIZE).double()
    query, keys, values, mask = make_inputs()
    base = module(query, module.project_keys(keys), values, mask)
    lengths = 0.1 + 5 * torch.rand(BATCH, SRC_LEN, 1, dtype=torch.float64)  # a positive factor per key
    stretched = module(3.0 * query, module.project_keys(lengths * keys), values, mask)
    torch.testing.assert_close(stretched.weights, base.weights, rtol=0, atol=1e-12)


# --- the fused SDPA path ---------------------------------------------------------------------------

@pytest.mark.parametrize("one_step", [False, True], ids=["all_steps", "one_step"])
@pytest.mark.parametrize("score", FUSABLE_SCORES)
def test_fused_context_equals_explicit_context_with_gradients(score: str, one_step: bool) -> None:
    module = Attention(score, query_size=SIZE, key_size=SIZE).double()
    assert module.fusable
    query, keys, values, mask = make_inputs(one_step=one_step)  # includes padding and an all-padding row

    def run(use_fused: bool) -> tuple[Tensor, list[Tensor]]:
        q, k, v = (t.clone().requires_grad_() for t in (query, keys, values))
        module.zero_grad()
        projected = module.project_keys(k)
        context = module.context(q, projected, v, mask, fused=True) if use_fused else module(q, projected, v, mask).context
        (context * torch.linspace(-1, 1, context.numel(), dtype=torch.float64).view_as(context)).sum().backward()
        grads = [q.grad, k.grad, v.grad] + [p.grad.clone() for p in module.parameters()]
        return context, grads

    explicit, explicit_grads = run(use_fused=False)
    fused, fused_grads = run(use_fused=True)
    assert fused.shape == explicit.shape
    torch.testing.assert_close(fused, explicit, rtol=0, atol=1e-12)
    assert torch.equal(fused[EMPTY_ROW], torch.zeros_like(fused[EMPTY_ROW]))
    for f, e in zip(fused_grads, explicit_grads, strict=True):
        torch.testing.assert_close(f, e, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("score", FUSABLE_SCORES)
def test_fused_context_gives_zero_for_all_padding_row_in_low_precision(score: str, dtype: torch.dtype) -> None:
    module = Attention(score, query_size=SIZE, key_size=SIZE).to(dtype)
    query, keys, values, mask = make_inputs(dtype)
    query.requires_grad_()
    context = module.context(query, module.project_keys(keys), values, mask, fused=True)
    assert torch.isfinite(context).all()
    assert torch.equal(context[EMPTY_ROW], torch.zeros_like(context[EMPTY_ROW]))
    explicit = module(query, module.project_keys(keys), values, mask).context
    torch.testing.assert_close(context, explicit, rtol=0.05, atol=0.05)
    context.float().sum().backward()
    assert torch.isfinite(query.grad).all()
    assert torch.equal(query.grad[EMPTY_ROW], torch.zeros_like(query.grad[EMPTY_ROW]))


def test_additive_context_falls_back_to_the_explicit_path() -> None:
    module = Attention("additive", query_size=SIZE, key_size=SIZE).double()
    assert not module.fusable
    query, keys, values, mask = make_inputs()
    projected = module.project_keys(keys)
    assert torch.equal(module.context(query, projected, values, mask, fused=True), module(query, projected, values, mask).context)


# --- user mistakes ------------------------------------------------------------------------------

def test_unknown_score_is_an_error_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown attention score 'dott'.*dot, general"):
        Attention("dott", query_size=4, key_size=4)  # type: ignore[arg-type]


@pytest.mark.parametrize("score", ["dot", "scaled_dot", "cosine"])
def test_parameter_free_scores_need_equal_query_and_key_sizes(score: str) -> None:
    with pytest.raises(ValueError, match="query_size == key_size"):
        Attention(score, query_size=4, key_size=6)


@pytest.mark.parametrize("score", ["general", "additive"])
def test_learned_scores_accept_different_query_and_key_sizes(score: str) -> None:
    module = Attention(score, query_size=4, key_size=6)
    states = torch.randn(2, 3, 6)
    context, weights = module(torch.randn(2, 4), module.project_keys(states), states)
    assert context.shape == (2, 6) and weights.shape == (2, 3)


def test_attend_refuses_learned_scores() -> None:
    query, keys, values, mask = make_inputs()
    with pytest.raises(ValueError, match="use Attention"):
        attend(query, keys, values, mask, score="general")  # type: ignore[arg-type]


def test_query_of_wrong_rank_is_an_error() -> None:
    _, keys, values, mask = make_inputs()
    with pytest.raises(ValueError, match="query must be"):
        attend(torch.randn(2, 3, 4, SIZE, dtype=torch.float64), keys, values, mask)
