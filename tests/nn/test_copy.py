"""Copy attention, the pointer-generator of See et al. 2017: the mixture (eqs. 8-9) by hand, the
extended ids, and the decoders and search that carry it; the issue's must-show, copying names
never seen in training, is at the end."""
from __future__ import annotations

import math

import pytest
import torch

from heed.data.extended import ExtendedVocab, source_ids, source_to_target
from heed.data.vocab import SPECIALS, Vocab
from heed.nn.copy import PointerGenerator

SRC_VOCAB = Vocab([*SPECIALS, "a", "b"])
TGT_VOCAB = Vocab([*SPECIALS, "a", "q"])


def make_pointer(context: int = 2, state: int = 2, inputs: int = 1) -> PointerGenerator:
    return PointerGenerator(context_size=context, state_size=state, input_size=inputs,
                            source_to_target=source_to_target(SRC_VOCAB, TGT_VOCAB), target_size=len(TGT_VOCAB))


# --- the mixture by hand ----------------------------------------------------------------------------

def test_worked_example_mixture_puts_one_minus_p_gen_times_attention_on_a_copied_unknown() -> None:
    # V = 5 (zero logits: P_vocab = 1/5 each). The switch's weights are 0 and its bias ln 3, so
    # p_gen = sigmoid(ln 3) = 3/4. Source positions hold extended ids [4, 5, 6, 5] with attention
    # [0.1, 0.2, 0.3, 0.4]: ids 5 and 6 are temporary (copied unknowns), id 4 a vocabulary word.
    #   P(0..3) = 3/4 * 1/5                 = 0.15
    #   P(4)    = 0.15 + 1/4 * 0.1          = 0.175
    #   P(5)    =        1/4 * (0.2 + 0.4)  = 0.15
    #   P(6)    =        1/4 * 0.3          = 0.075     sum = 4 * 0.15 + 0.175 + 0.15 + 0.075 = 1
    pointer = PointerGenerator(context_size=1, state_size=1, input_size=1, source_to_target=[0, 1, 2, 3],
                               target_size=5).double()
    with torch.no_grad():
        pointer.gate.weight.zero_()
        pointer.gate.bias.fill_(math.log(3))
    weights = torch.tensor([[0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    copy_ids = torch.tensor([[4, 5, 6, 5]])
    log_p = pointer(torch.zeros(1, 5, dtype=torch.float64), torch.randn(1, 3, dtype=torch.float64), weights,
                    copy_ids, width=7)
    by_hand = torch.tensor([[0.15, 0.15, 0.15, 0.15, 0.175, 0.15, 0.075]])
    torch.testing.assert_close(log_p.exp(), by_hand.float(), rtol=0, atol=1e-6)
    assert log_p.dtype == torch.float32


@pytest.mark.parametrize("all_steps", [False, True], ids=["one_step", "all_steps"])
def test_mixture_sums_to_one_over_the_extended_vocabulary_and_is_minus_inf_on_unused_ids(all_steps: bool) -> None:
    pointer = make_pointer()
    lead = (3, 4) if all_steps else (3,)
    weights = torch.softmax(torch.randn(*lead, 5), dim=-1)
    copy_ids = torch.tensor([[4, 6, 6, 7, 2], [5, 4, 6, 2, 0], [6, 2, 0, 0, 0]])
    log_p = pointer(torch.randn(*lead, 6), torch.randn(*lead, 5), weights, copy_ids, width=9)
    assert log_p.shape == (*lead, 9)
    torch.testing.assert_close(log_p.exp().sum(-1), torch.ones(lead), rtol=0, atol=1e-6)
    assert torch.isneginf(log_p[..., 8]).all()  # no source token has id 8


def test_extended_ids_agree_with_the_data_side() -> None:
    # The model sees only the source ids; it must name each position as ExtendedVocab does.
    pointer = make_pointer()
    sentences = [["b", "zed", "a", "b", "zed", "q"], ["x", "a"], ["q", "y", "b", "y"]]
    width = max(map(len, sentences)) + 1
    src = torch.zeros(len(sentences), width, dtype=torch.long)
    expected = torch.zeros_like(src)
    for r, tokens in enumerate(sentences):
        ids = [*source_ids(tokens, SRC_VOCAB, TGT_VOCAB), 2]  # + </s>
        src[r, :len(ids)] = torch.tensor(ids)
        expected[r, :len(ids)] = torch.tensor([*ExtendedVocab.of(tokens, TGT_VOCAB).encode(tokens), 2])
    ids, n_unknown = pointer.extended_ids(src)
    assert torch.equal(ids, expected)
    assert n_unknown == 2  # "b" and "zed"; "x"; "y" and "b"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_an_all_padding_row_gives_the_vocabulary_distribution_not_nan(dtype: torch.dtype) -> None:
    pointer = make_pointer().to(dtype)
    weights = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]], dtype=dtype)  # row 1: no source at all
    logits = torch.randn(2, 6).to(dtype)
    copy_ids = torch.tensor([[6, 4, 0], [0, 0, 0]])
    gate_input = torch.randn(2, 5).to(dtype).requires_grad_()
    log_p = pointer(logits, gate_input, weights, copy_ids, width=7)
    assert not log_p.isnan().any()
    torch.testing.assert_close(log_p[1, :6], torch.log_softmax(logits[1].float(), -1), rtol=0, atol=1e-6)
    torch.testing.assert_close(log_p.exp().sum(-1), torch.ones(2), rtol=0, atol=1e-3)
    log_p[:, :6].sum().backward()
    assert torch.isfinite(gate_input.grad).all()
