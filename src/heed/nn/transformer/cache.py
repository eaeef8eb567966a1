"""The decoder's self-attention key/value cache for eager decoding: buffers allocated once per search
and written in place, instead of one concatenation per layer and step.

A step appends one position to every decoder layer's keys and values. Concatenating makes new
(rows, heads, steps, d_k) tensors at every step and layer, and beam search's reordering copies them
once more; at 64 sentences x beam 5 that is a few hundred MB a step. Here each layer's keys and
values live in a buffer (rows, heads, capacity, d_k):

- a step writes its position at `length` and attends over the view [:, :, :length + 1];
- `select` (beams reordered, finished rows dropped) copies the filled positions of the chosen rows
  into the state's other buffer, which the state keeps beside the first: two buffers a tensor, each
  allocated once per search (again only when the capacity doubles, or the rows grow);
- the capacity doubles when a step would pass it.

The numbers are the concatenating cache's, to the bit (tests/nn/transformer/test_cache.py). A state
is for one search: a step writes into the buffers its input state shares with the state it returns,
and a `select` writes into the buffers its input's earlier `select` returned, so only the newest
state of a search may be stepped or selected (as heed.search does).

The exported step graph (heed.nn.transformer.onnx) keeps the concatenating cache, whose steps axis
an ONNX graph can grow.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

FIRST_CAPACITY = 16  # positions the buffers hold at first; they double when a step would pass it


@dataclass
class _Buffers:
    """One search's two sets of buffers: `live[name]` (rows, heads, capacity, d_k) and a spare of
    the same capacity that the next `select` copies into (None until it is needed)."""

    live: dict[str, Tensor]
    spare: dict[str, Tensor] | None = None


class KVCache:
    """Every decoder layer's self-attention keys and values (heed.nn.protocol.SearchState), named as
    the concatenating cache's tensors (heed.nn.transformer.model.cache_names); `length` positions
    are filled."""

    def __init__(self, buffers: _Buffers, length: int) -> None:
        self._buffers = buffers
        self.length = length

    @classmethod
    def empty(cls, names: list[str], rows: int, heads: int, d_k: int, *, like: Tensor,
              capacity: int = FIRST_CAPACITY) -> KVCache:
        """No position filled yet: buffers (rows, heads, capacity, d_k) of `like`'s dtype and device."""
        return cls(_Buffers({name: like.new_empty(rows, heads, capacity, d_k) for name in names}), 0)

    @property
    def rows(self) -> int:
        return next(iter(self._buffers.live.values())).size(0)

    @property
    def capacity(self) -> int:
        return next(iter(self._buffers.live.values())).size(2)

    def __getitem__(self, name: str) -> Tensor:
        """The filled positions of one tensor: (rows, heads, length, d_k), a view of its buffer."""
        return self._buffers.live[name][:, :, : self.length]

    @property
    def tensors(self) -> Mapping[str, Tensor]:
        return {name: self[name] for name in self._buffers.live}

    def buffer(self, name: str) -> Tensor:
        """The whole buffer (rows, heads, capacity, d_k) that a step writes position `length` into."""
        return self._buffers.live[name]

    def reserve(self, positions: int) -> None:
        """Room for `positions` more: the capacity doubles (the filled positions copied) until it holds
        them. Called by a step before it writes."""
        needed = self.length + positions
        if needed <= self.capacity:
            return
        capacity = self.capacity
        while capacity < needed:
            capacity *= 2
        grown = {}
        for name, buffer in self._buffers.live.items():
            rows, heads, _, d_k = buffer.shape
            grown[name] = buffer.new_empty(rows, heads, capacity, d_k)
            grown[name][:, :, : self.length] = buffer[:, :, : self.length]
        self._buffers.live, self._buffers.spare = grown, None

    def advanced(self, positions: int = 1) -> KVCache:
        """The state after a step wrote `positions` positions into the buffers."""
        return KVCache(self._buffers, self.length + positions)

    def select(self, indices: Tensor) -> KVCache:
        """Rows `indices` (n,) long, in that order: their filled positions copied into the spare
        buffers, which become the live ones (and the live ones the spare)."""
        rows = indices.numel()
        live, spare = self._buffers.live, self._buffers.spare
        if spare is None or next(iter(spare.values())).size(0) < rows:
            spare = {name: b.new_empty(max(rows, b.size(0)), *b.shape[1:]) for name, b in live.items()}
        out = {}
        for name, buffer in live.items():
            target = spare[name][:rows]  # the first rows of a contiguous buffer: contiguous itself
            torch.index_select(buffer[:, :, : self.length], 0, indices, out=target[:, :, : self.length])
            out[name] = target
        return KVCache(_Buffers(out, _spare_of(live, out)), self.length)


def _spare_of(old: dict[str, Tensor], new: dict[str, Tensor]) -> dict[str, Tensor] | None:
    """The buffers the next `select` may write into: the old live ones, unless they are the new
    ones' own memory (a select into a buffer's first rows)."""
    if any(o.data_ptr() == n.data_ptr() for o, n in zip(old.values(), new.values())):
        return None
    return old
