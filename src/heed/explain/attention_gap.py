"""How far apart two models' attention is on the same sentence pairs: an int8 export beside the
float32 model it came from, a bf16 translator beside a float32 one, two checkpoints of a run.

Both models read the same target as their own output (teacher forcing, heed.explain.forced), so their
matrices have the same cells: rows the output tokens and </s>, columns the source tokens (without
the source's </s>, as alignment reads them). `Translator.attention_gap` and `heed align --beside`
report it; `bench/studies/quantized_attention.py` measures it for exports.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class AttentionGap:
    """Per pair k (None where a side is empty and there is no attention):

    mean_abs[k]:  mean over the cells of |A - B|
    max_abs[k]:   the largest |A - B| of the pair
    cells[k]:     how many cells (rows x source tokens)
    rows[k]:      how many rows (output tokens + </s>)
    moved[k]:     how many rows attend most to another source token in B than in A
    """

    mean_abs: list[float | None]
    max_abs: list[float | None]
    cells: list[int]
    rows: list[int]
    moved: list[int]

    @property
    def mean(self) -> float:
        """Mean |A - B| over every cell of every pair (a long pair weighs more)."""
        total = sum(m * c for m, c in zip(self.mean_abs, self.cells) if m is not None)
        return total / max(sum(self.cells), 1)

    @property
    def max(self) -> float:
        return max((m for m in self.max_abs if m is not None), default=0.0)

    @property
    def moved_share(self) -> float:
        """The share of output rows whose most-attended source token differs."""
        return sum(self.moved) / max(sum(self.rows), 1)

    def summary(self) -> str:
        """One line: "mean |Δ attention| 0.0021 per cell (max 0.043); the most-attended source
        token moved in 0.4% of 1,234 output tokens"."""
        return (f"mean |Δ attention| {self.mean:.4f} per cell (max {self.max:.3f}); the most-attended source "
                f"token moved in {100 * self.moved_share:.1f}% of {sum(self.rows):,} output tokens")


def attention_gap(first: Sequence[np.ndarray | None], second: Sequence[np.ndarray | None]) -> AttentionGap:
    """The gap between two lists of attention matrices, pair by pair: `first[k]` and `second[k]`
    (tgt_len + 1, src_len) float arrays of the same shape, or both None (nothing to compare)."""
    if len(first) != len(second):
        raise ValueError(f"{len(first)} matrices against {len(second)}; give one per pair on each side")
    means: list[float | None] = []
    maxes: list[float | None] = []
    cells, rows, moved = [], [], []
    for k, (a, b) in enumerate(zip(first, second)):
        if a is None or b is None:
            if (a is None) != (b is None):
                raise ValueError(f"pair {k}: one side has attention and the other has none")
            means.append(None)
            maxes.append(None)
            cells.append(0)
            rows.append(0)
            moved.append(0)
            continue
        if a.shape != b.shape:
            raise ValueError(f"pair {k}: attention shapes {a.shape} and {b.shape} differ; the two models must "
                             "tokenize the pair alike")
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        means.append(float(diff.mean()) if diff.size else 0.0)
        maxes.append(float(diff.max()) if diff.size else 0.0)
        cells.append(int(diff.size))
        rows.append(int(a.shape[0]))
        moved.append(int((a.argmax(axis=1) != b.argmax(axis=1)).sum()) if a.shape[1] else 0)
    return AttentionGap(means, maxes, cells, rows, moved)
