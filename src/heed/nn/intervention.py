"""Attention interventions: does the output depend on where the model looks? (Jain & Wallace 2019;
Wiegreffe & Pinter 2019). Inside `intervening(Intervention(kind, seed))`, every attention over the
source, in both families (the RNN's one attention, every head of every Transformer decoder layer's
cross-attention), has its weights replaced before they weigh the values:

    uniform   the same weight on every real source token (padding stays 0)
    permute   the row's weights shuffled among its real source tokens (a fresh order every row and
              step, drawn from `seed`)
    drop_top  the most-weighted source token's weight set to 0 and the rest renormalised (a row
              whose only weight was that one attends to nothing: a zero context)

Self-attention (a Transformer's over the source and over the target) is left alone. A fused path
that never materialises the weights steps aside while an intervention is active, so the numbers are
those of the explicit path. Used by `heed faithfulness` and the explorer's permuted toggle.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

InterventionKind = Literal["uniform", "permute", "drop_top"]
KINDS: tuple[InterventionKind, ...] = get_args(InterventionKind)


@dataclass(frozen=True)
class Intervention:
    kind: InterventionKind
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown attention intervention {self.kind!r}; choose one of {', '.join(KINDS)}")


@dataclass
class _Active:
    intervention: Intervention
    generator: torch.Generator


_ACTIVE: ContextVar[_Active | None] = ContextVar("heed_attention_intervention", default=None)


def active() -> bool:
    """Whether an intervention is in force (fused attention paths step aside then)."""
    return _ACTIVE.get() is not None


@contextlib.contextmanager
def intervening(intervention: Intervention | None) -> Iterator[None]:
    """Every attention over the source run inside is intervened on (None: nothing changes)."""
    if intervention is None:
        yield
        return
    generator = torch.Generator().manual_seed(intervention.seed)
    token = _ACTIVE.set(_Active(intervention, generator))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def intervene(weights: Tensor, mask: Tensor | None) -> Tensor:
    """weights (..., src_len) after the softmax, mask bool broadcastable to them (True = a real
    source token; None = all real) -> the weights the active intervention gives (the same tensor
    when none is active)."""
    current = _ACTIVE.get()
    if current is None:
        return weights
    real = torch.ones_like(weights, dtype=torch.bool) if mask is None else mask.expand_as(weights)
    kind = current.intervention.kind
    if kind == "uniform":
        counts = real.sum(-1, keepdim=True).clamp(min=1)
        return real.to(weights.dtype) / counts.to(weights.dtype)
    if kind == "drop_top":
        top = weights.argmax(-1, keepdim=True)
        dropped = weights.scatter(-1, top, 0.0)
        total = dropped.sum(-1, keepdim=True)
        return torch.where(total > 0, dropped / total.clamp(min=torch.finfo(weights.dtype).tiny), dropped)
    # permute: real positions in a random order, their weights written back in position order
    noise = torch.rand(weights.shape, generator=current.generator).to(weights.device)
    far = torch.full_like(noise, 2.0)
    shuffled = torch.where(real, noise, far).argsort(-1)  # real positions first, in random order
    positions = torch.arange(weights.size(-1), device=weights.device).expand_as(weights)
    in_order = torch.where(real, positions, weights.size(-1)).argsort(-1)  # real positions first, in order
    return torch.zeros_like(weights).scatter(-1, in_order, weights.gather(-1, shuffled))


__all__ = ["KINDS", "Intervention", "InterventionKind", "active", "intervene", "intervening"]
