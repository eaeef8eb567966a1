"""RNN state helpers: an LSTM state is (h, c), a GRU state is (h,); each tensor (layers, batch, hidden)."""
from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

RNNState = tuple[Tensor, ...]


def as_state(raw: Tensor | tuple[Tensor, Tensor]) -> RNNState:
    """What nn.LSTM / nn.GRU return as state, as a tuple."""
    return tuple(raw) if isinstance(raw, tuple) else (raw,)


def as_raw(state: RNNState) -> Tensor | tuple[Tensor, Tensor]:
    """A tuple state back into what nn.LSTM / nn.GRU take."""
    return state if len(state) == 2 else state[0]


def map_state(fn: Callable[[Tensor], Tensor], state: RNNState) -> RNNState:
    return tuple(fn(t) for t in state)


def select_batch(state: RNNState, indices: Tensor) -> RNNState:
    """Rows `indices` of the batch axis (axis 1) of every tensor in the state."""
    return map_state(lambda t: t.index_select(1, indices), state)
