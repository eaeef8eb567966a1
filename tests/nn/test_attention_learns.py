"""Attention alone is a soft dictionary: a tiny model learns to look up the value stored under the
key nearest its query, among distractors, and generalises to dictionaries it has never seen.
250 Adam steps on batches of 128: under a second per score on an idle CPU core (100% held-out
accuracy from 150 steps on, across seeds, so the 99% bar has margin)."""
from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from heed.nn.rnn.attention import Attention

KEY_SIZE, VALUE_SIZE = 16, 16
PAIRS = 8  # real (key, value) pairs per dictionary: one answer, seven distractors
DECOYS = 2  # padded slots whose keys match the query best; the mask must hide them


def make_dictionaries(n: int, rotation: Tensor, generator: torch.Generator):
    """n random dictionaries and one query each.

    keys (n, PAIRS + DECOYS, key) unit vectors, values (n, PAIRS + DECOYS, value) unit vectors,
    mask bool (n, PAIRS + DECOYS), True = real pair, query (n, key), target (n,) the index of the
    real key nearest the query. The query is a noisy key seen through a fixed rotation, so the model
    must learn to undo the rotation (its query projection) before the dot product can match keys.
    """
    slots = PAIRS + DECOYS
    keys = nn.functional.normalize(torch.randn(n, slots, KEY_SIZE, generator=generator), dim=-1)
    values = nn.functional.normalize(torch.randn(n, slots, VALUE_SIZE, generator=generator), dim=-1)
    pick = torch.randint(PAIRS, (n,), generator=generator)
    wanted = keys[torch.arange(n), pick]  # (n, key)
    keys[:, PAIRS:] = wanted.unsqueeze(1)  # decoys: a perfect key match, but padding
    mask = torch.arange(slots) < PAIRS  # (slots,)
    mask = mask.expand(n, slots)
    noisy = wanted + 0.05 * torch.randn(n, KEY_SIZE, generator=generator)
    query = noisy @ rotation.T  # (n, key): the key in the query's own coordinates
    # The truth, by definition: the real key nearest (by cosine) to the un-rotated query.
    cos = nn.functional.cosine_similarity(keys, noisy.unsqueeze(1), dim=-1).masked_fill(~mask, -2.0)
    target = cos.argmax(dim=-1)  # (n,)
    return keys, values, mask, query, target


class SoftDictionary(nn.Module):
    """A learned query projection, then one Attention look-up: the whole model."""

    def __init__(self, score: str) -> None:
        super().__init__()
        self.query_proj = nn.Linear(KEY_SIZE, KEY_SIZE, bias=False)
        self.attention = Attention(score, query_size=KEY_SIZE, key_size=KEY_SIZE)

    def forward(self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor):
        return self.attention(self.query_proj(query), self.attention.project_keys(keys), values, mask)


def accuracy(model: SoftDictionary, keys, values, mask, query, target) -> float:
    """A look-up is right when the returned context is nearest (by dot product) to the target's value."""
    with torch.no_grad():
        context = model(query, keys, values, mask).context  # (n, value)
        scores = (values @ context.unsqueeze(-1)).squeeze(-1).masked_fill(~mask, float("-inf"))
        return (scores.argmax(dim=-1) == target).float().mean().item()


@pytest.mark.parametrize("score", ["general", "dot"])
def test_attention_learns_a_soft_dictionary_lookup(score: str) -> None:
    generator = torch.Generator().manual_seed(1234)
    rotation, _ = torch.linalg.qr(torch.randn(KEY_SIZE, KEY_SIZE, generator=generator))
    model = SoftDictionary(score)
    optimiser = torch.optim.Adam(model.parameters(), lr=0.03)
    for _ in range(250):
        keys, values, mask, query, target = make_dictionaries(128, rotation, generator)
        context = model(query, keys, values, mask).context
        loss = (context - values[torch.arange(len(target)), target]).pow(2).sum(-1).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()

    held_out = make_dictionaries(2000, rotation, torch.Generator().manual_seed(99))  # unseen keys and values
    acc = accuracy(model, *held_out)
    assert acc >= 0.99, f"held-out look-up accuracy {acc:.3f}"
    # The mask hides the decoys even though they match the query best.
    keys, values, mask, query, _ = held_out
    weights = model(query, keys, values, mask).weights  # (n, PAIRS + DECOYS)
    assert torch.equal(weights[:, PAIRS:], torch.zeros_like(weights[:, PAIRS:]))


def test_an_untrained_dictionary_is_near_chance() -> None:
    """The control: the task cannot be solved without learning the query projection."""
    generator = torch.Generator().manual_seed(1234)
    rotation, _ = torch.linalg.qr(torch.randn(KEY_SIZE, KEY_SIZE, generator=generator))
    acc = accuracy(SoftDictionary("dot"), *make_dictionaries(2000, rotation, torch.Generator().manual_seed(99)))
    assert acc < 0.3  # chance is 1/PAIRS = 0.125
