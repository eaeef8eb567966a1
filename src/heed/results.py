"""What a reading of a model gives (heed.explain.readings): one labelled result type, whatever the
reading, so the command line, the server and Python show every reading the same way.

A `ReadingResult` is one sentence pair's numbers, an array whose axes are named from one
vocabulary, in this order:

    layer   a decoder layer, 0-based
    head    an attention head of that layer, 0-based
    target  a target row: tgt_tokens, then </s> (the output predicted there)
    source  a source column: src_tokens, then </s>
    prefix  a decoder input: <s>, then tgt_tokens (what a prediction read of the output so far)
    top     a rank, 0 = likeliest

e.g. ("layer", "head", "target", "source") for every head's attention, ("target", "source") for one
matrix. What a reading gives besides (the logit lens' top tokens, attribution's prefix share) are
`extras`, labelled the same way. Torch-free: numpy only.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

AXES = ("layer", "head", "target", "source", "prefix", "top")
BOS_LABEL, EOS_LABEL = "<s>", "</s>"


@dataclass(frozen=True)
class Labelled:
    """An array with named axes (AXES, in that order): values.ndim == len(dims)."""

    dims: tuple[str, ...]
    values: np.ndarray

    def __post_init__(self) -> None:
        unknown = [d for d in self.dims if d not in AXES]
        if unknown or list(self.dims) != sorted(self.dims, key=AXES.index) or len(set(self.dims)) != len(self.dims):
            raise ValueError(f"dims {self.dims} must be distinct names of {AXES}, in that order")
        if np.ndim(self.values) != len(self.dims):
            raise ValueError(f"dims {self.dims} name {len(self.dims)} axes; the values have {np.ndim(self.values)}")

    def to_dict(self) -> dict[str, Any]:
        return {"dims": list(self.dims), "values": np.asarray(self.values).tolist()}


@dataclass(frozen=True)
class ReadingResult:
    """One sentence pair read by one reading.

    reading:    the reading's name (heed.explain.readings.READINGS)
    src_tokens: the source as the model read it, without </s>
    tgt_tokens: the target as the model read it (teacher forced), without </s>
    dims, values: the reading's array (module doc), e.g. (layers, heads, len(tgt_tokens) + 1,
                len(src_tokens) + 1) for ("layer", "head", "target", "source")
    extras:     what else the reading gives, by name, each labelled alike
    """

    reading: str
    src_tokens: list[str]
    tgt_tokens: list[str]
    dims: tuple[str, ...]
    values: np.ndarray
    extras: Mapping[str, Labelled] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for array in (Labelled(self.dims, self.values), *self.extras.values()):
            for dim, size in zip(array.dims, np.shape(array.values)):
                labels = self.labels(dim)
                if labels is not None and len(labels) != size:
                    raise ValueError(f"{self.reading}: axis {dim!r} has {size} entries for {len(labels)} labels")

    def labels(self, dim: str) -> list[str] | None:
        """The labels of axis `dim`: tokens for target, source and prefix; None for the numbered ones."""
        if dim == "target":
            return [*self.tgt_tokens, EOS_LABEL]
        if dim == "source":
            return [*self.src_tokens, EOS_LABEL]
        if dim == "prefix":
            return [BOS_LABEL, *self.tgt_tokens]
        return None

    def extra(self, name: str) -> np.ndarray:
        return self.extras[name].values

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: what `heed explain` writes and /v1/explain/{reading} answers."""
        return {"reading": self.reading, "src_tokens": self.src_tokens, "tgt_tokens": self.tgt_tokens,
                "dims": list(self.dims), "values": np.asarray(self.values).tolist(),
                "extras": {name: array.to_dict() for name, array in self.extras.items()}}


__all__ = ["AXES", "Labelled", "ReadingResult"]
