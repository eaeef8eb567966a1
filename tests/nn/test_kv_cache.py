"""The Transformer's key/value cache written in place (heed.nn.transformer.cache.KVCache) gives the
concatenating cache's numbers to the bit, through steps, beam reorders, dropped rows and growth."""
from __future__ import annotations

import pytest
import torch
from search_fakes import padded_batch, tiny_model

from heed.nn.transformer.cache import FIRST_CAPACITY, KVCache
from heed.nn.transformer.model import empty_cache
from heed.search import DecodeConfig, beam_search, greedy_search

BOS = 1


def _concatenating(model, enc):  # the exported step graph's state: caches (rows, heads, steps, d_k)
    keys = enc.memory[0][0]
    return empty_cache(model.layers, enc.mask.size(0) * enc.group, keys.size(1), keys.size(3), like=keys)


def test_steps_selects_and_growth_equal_the_concatenating_cache() -> None:
    """Reordered rows, fewer rows, and more steps than the first capacity (it doubles twice)."""
    model = tiny_model("transformer")
    src, lengths = padded_batch([6, 2])
    gen = torch.Generator().manual_seed(3)
    steps = 2 * FIRST_CAPACITY + 3
    with torch.no_grad():
        enc = model.encode(src, lengths).repeat(3)  # 6 rows
        in_place, concatenated = model.init_state(enc), _concatenating(model, enc)
        assert isinstance(in_place, KVCache)
        prev = torch.full((6,), BOS)
        rows = 6
        for t in range(steps):
            a = model.step(prev, in_place, enc)
            b = model.step(prev, concatenated, enc)
            assert torch.equal(a.logits, b.logits), f"step {t}"
            for name in b.state.tensors:
                assert torch.equal(a.state[name], b.state[name]), (t, name)
            order = torch.randperm(rows, generator=gen)  # beams reordered
            if t == 20:  # a source finishes: its rows leave (the grouped memory leaves with it)
                order = torch.tensor([3, 5, 4])
                enc = enc.select(torch.tensor([1]))
                rows = 3
            in_place, concatenated = a.state.select(order), b.state.select(order)
            prev = torch.randint(3, 9, (rows,), generator=gen)
    assert in_place.length == steps and in_place.capacity == 4 * FIRST_CAPACITY


@pytest.mark.parametrize("beam_size", [1, 4])
def test_search_finds_the_same_hypotheses_with_either_cache(beam_size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_model("transformer")
    src, lengths = padded_batch([7, 2, 5, 4])
    cfg = DecodeConfig(beam_size=beam_size, n_best=min(beam_size, 2), max_len_a=0.0, max_len_b=40, min_len=30)
    search = greedy_search if beam_size == 1 else beam_search
    with torch.no_grad():
        in_place = search(model, src, lengths, cfg)
        monkeypatch.setattr(type(model), "init_state", lambda self, enc: _concatenating(self, enc))
        concatenated = search(model, src, lengths, cfg)
    flat = [h for hs in in_place for h in (hs if isinstance(hs, list) else [hs])]
    other = [h for hs in concatenated for h in (hs if isinstance(hs, list) else [hs])]
    assert [h.tokens for h in flat] == [h.tokens for h in other]
    assert all(len(h.tokens) >= 30 for h in flat)  # past the first capacity: the buffers grew
    assert [h.log_prob for h in flat] == [h.log_prob for h in other]
