"""Attention interventions (heed.nn.intervention): each kind's weights, and that both families'
attention over the source, and only it, takes them."""
import pytest
import torch

from heed.nn.intervention import Intervention, intervene, intervening
from heed.nn.rnn.attention import Attention


def _weights() -> tuple[torch.Tensor, torch.Tensor]:
    weights = torch.tensor([[0.1, 0.6, 0.3, 0.0], [0.5, 0.5, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True, False], [True, True, False, False]])
    return weights, mask


def test_no_intervention_returns_the_weights_themselves() -> None:
    weights, mask = _weights()
    assert intervene(weights, mask) is weights


def test_uniform_spreads_over_real_tokens_only() -> None:
    weights, mask = _weights()
    with intervening(Intervention("uniform")):
        out = intervene(weights, mask)
    torch.testing.assert_close(out, torch.tensor([[1 / 3, 1 / 3, 1 / 3, 0.0], [0.5, 0.5, 0.0, 0.0]]))


def test_drop_top_zeroes_the_argmax_and_renormalises() -> None:
    weights, mask = _weights()
    with intervening(Intervention("drop_top")):
        out = intervene(weights, mask)
    torch.testing.assert_close(out, torch.tensor([[0.25, 0.0, 0.75, 0.0], [0.0, 1.0, 0.0, 0.0]]))
    with intervening(Intervention("drop_top")):  # a row with one real token attends to nothing
        alone = intervene(torch.tensor([[1.0, 0.0]]), torch.tensor([[True, False]]))
    assert alone.tolist() == [[0.0, 0.0]]


def test_permute_shuffles_within_real_tokens_and_is_seeded() -> None:
    torch.manual_seed(0)
    weights = torch.softmax(torch.randn(50, 7), -1) * torch.tensor([1.0] * 5 + [0.0] * 2)
    mask = torch.tensor([True] * 5 + [False] * 2).expand(50, 7)
    with intervening(Intervention("permute", seed=3)):
        out = intervene(weights, mask)
    with intervening(Intervention("permute", seed=3)):
        again = intervene(weights, mask)
    with intervening(Intervention("permute", seed=4)):
        other = intervene(weights, mask)
    torch.testing.assert_close(out, again)
    assert not torch.equal(out, other)
    assert (out[:, 5:] == 0).all()  # padding keeps no weight
    torch.testing.assert_close(out.sort(-1).values, weights.sort(-1).values)  # the same weights, each row
    assert (out != weights).any(-1).float().mean() > 0.9  # and moved in nearly every row


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="uniform, permute, drop_top"):
        Intervention("zero")  # type: ignore[arg-type]


@pytest.mark.parametrize("score", ["general", "additive", "location"])
def test_rnn_attention_weighs_values_with_the_intervened_weights(score: str) -> None:
    torch.manual_seed(0)
    attention = Attention(score, query_size=6, key_size=6, max_positions=8 if score == "location" else None).eval()
    query, states = torch.randn(2, 3, 6), torch.randn(2, 5, 6)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    keys = attention.project_keys(states)
    with intervening(Intervention("uniform")):
        out = attention(query, keys, states, mask)
        context = attention.context(query, keys, states, mask, fused=True)
    expected = torch.stack([states[0].mean(0), states[1, :3].mean(0)])[:, None].expand(2, 3, 6)
    torch.testing.assert_close(out.context, expected)
    torch.testing.assert_close(context, expected)
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(2, 3))
