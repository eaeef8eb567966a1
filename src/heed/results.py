"""The named things heed's looking and translating give, beside heed.api (which re-exports them):
a Translation, an Exploration of one sentence (its BeamNodes: the beam search tree), an Alignment
of given pairs, every head's HeadMaps, and what a reading of a model
gives (heed.explain.readings): one labelled result type, whatever the reading, so the command line,
the server and Python show every reading the same way.

A `ReadingResult` is one sentence pair's numbers, an array whose axes are named from one
vocabulary, in this order:

    layer   a decoder layer, 0-based
    head    an attention head of that layer, 0-based
    target  a target row: tgt_tokens, then </s> (the output predicted there)
    source  a source column: src_tokens, then </s>
    prefix  a decoder input: <s>, then tgt_tokens (what a prediction read of the output so far)
    key     a source position the encoder's self-attention reads: src_tokens, then </s> (its
            queries are the "source" axis)
    top     a rank, 0 = likeliest
    contrast a token of another output a reading weighs against tgt_tokens (contrast's), numbered

e.g. ("layer", "head", "target", "source") for every head's attention, ("target", "source") for one
matrix. What a reading gives besides (the logit lens' top tokens, attribution's prefix share) are
`extras`, labelled the same way. Torch-free: numpy only.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from heed.data.pharaoh import Link, to_pharaoh

AXES = ("layer", "head", "target", "source", "prefix", "key", "top", "contrast")
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
        """The labels of axis `dim`: tokens for target, source, prefix and key; None for the numbered ones."""
        if dim == "target":
            return [*self.tgt_tokens, EOS_LABEL]
        if dim in ("source", "key"):
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



@dataclass(frozen=True)
class Translation:
    """One translated sentence.

    text:       the detokenized output
    tokens:     output tokens, without </s>
    src_tokens: the source as the model saw it (tokenized), without </s>
    score:      the search's ranking score (log-probability, after any length/coverage penalty)
    attention:  float32 (len(tokens) + 1, len(src_tokens) + 1): row j is where output j (last row:
                </s>) looked, over the source tokens and the source's </s>; None for a model
                without attention
    truncated:  source tokens dropped beyond the translator's max_src_len (0: all were read)
    log_prob:   the model's log-probability of the output (its tokens and </s>), before penalties
    """

    text: str
    tokens: list[str]
    src_tokens: list[str]
    score: float
    attention: np.ndarray | None
    truncated: int = 0
    log_prob: float = 0.0

    def labels(self) -> tuple[list[str], list[str]]:
        """(source labels, output labels) for the attention matrix's columns and rows."""
        return [*self.src_tokens, EOS_LABEL], [*self.tokens, EOS_LABEL]

    def __repr__(self) -> str:
        """One line: the text, score and sizes, not the attention's numbers (`.attention` has them)."""
        shape = "None" if self.attention is None else "x".join(map(str, self.attention.shape))
        cut = f", truncated={self.truncated}" if self.truncated else ""
        return (f"Translation(text={self.text!r}, score={self.score:.4f}, tokens={len(self.tokens)}, "
                f"src_tokens={len(self.src_tokens)}, attention={shape}{cut})")


@dataclass(frozen=True)
class Alignment:
    """Where the model looks while it reads a given translation of a sentence (forced decoding),
    between the sentences' whitespace words, whatever the model's tokens.

    src_words, tgt_words: the (normalized) sentences split at spaces; Pharaoh positions index these
               (target positions count characters instead with AlignOptions(tgt_units="chars"))
    attention: float32 (target units, len(src_words)): the token attention of the teacher-forced
               pass that the AlignOptions read, without the source's </s> column, lifted to words
               (source pieces summed, target pieces averaged; heed.explain.align_methods.UnitMaps); rows
               sum to at most 1 (the rest went to the source's </s>)
    links:     the hard alignment `[(i, j), ...]`: for every target unit j, the source word i
               with the most weight (Pharaoh order, source first)
    """

    src_words: list[str]
    tgt_words: list[str]
    attention: np.ndarray
    links: list[Link]

    def pharaoh(self) -> str:
        """The links as one Pharaoh line, "0-0 1-2 2-1"."""
        return to_pharaoh(self.links)


@dataclass(frozen=True)
class HeadMaps:
    """Every head of every layer of a teacher-forced pass over one sentence pair.

    src_tokens, tgt_tokens: without </s>; the maps' source axes are src_tokens then </s>, their
                target axes tgt_tokens then </s> (rows: the output predicted there), and the
                decoder self-attention's key axis the decoder inputs <s>, tgt_tokens
    cross:      float32 (layers, heads, len(tgt_tokens) + 1, len(src_tokens) + 1) attention over the
                source; an RNN's one attention is (1, 1, ...)
    encoder:    (layers, heads, len(src_tokens) + 1, len(src_tokens) + 1) encoder self-attention, when
                asked for and the model has it (a Transformer), else None
    decoder:    (layers, heads, len(tgt_tokens) + 1, len(tgt_tokens) + 1) decoder self-attention
                (causal), likewise
    """

    src_tokens: list[str]
    tgt_tokens: list[str]
    cross: np.ndarray
    encoder: np.ndarray | None = None
    decoder: np.ndarray | None = None

    @classmethod
    def of(cls, result: ReadingResult) -> HeadMaps:
        """The reading `heads`' result (heed.explain.heads) as its maps: the values, and its extras
        "encoder" and "decoder" where it has them."""
        extras = result.extras
        return cls(result.src_tokens, result.tgt_tokens, result.values,
                   extras["encoder"].values if "encoder" in extras else None,
                   extras["decoder"].values if "decoder" in extras else None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as POST /v1/heads answers."""
        return {"src_tokens": self.src_tokens, "tgt_tokens": self.tgt_tokens, "cross": self.cross.tolist(),
                "encoder": None if self.encoder is None else self.encoder.tolist(),
                "decoder": None if self.decoder is None else self.decoder.tolist()}


MAP_PARTS = ("cross", "encoder", "decoder")


@dataclass(frozen=True)
class BeamNode:
    """A candidate beam search ranked: `token` appended to the output of node `parent`.

    step: output position (-1: the root, before the first token); log_prob: cumulative; score: the
    ranking score of a finished node, else its log_prob; status: "root", "kept", "finished" or
    "pruned" (see heed.search.TreeNode)."""

    id: int
    parent: int | None
    step: int
    token: str
    log_prob: float
    score: float
    status: str


@dataclass(frozen=True)
class Exploration:
    """One sentence looked at closely (what the explorer page shows).

    hypotheses:   the n-best Translations, best first (empty source: one empty Translation)
    steps:        for the best hypothesis, one list per output position (its tokens, then </s>): the
                  model's `alternatives` most likely tokens there as (token, log_prob), given the
                  hypothesis' tokens before it (teacher forced; PAD and BOS left out)
    beam:         the beam search tree, root first; None for greedy search and sampling
    nodes:        for each hypothesis, its finished node in `beam` (None without a tree)
    alignments:   for each hypothesis, its word Alignment (None for a model without attention)
    """

    hypotheses: list[Translation]
    steps: list[list[tuple[str, float]]]
    beam: list[BeamNode] | None
    nodes: list[int | None]
    alignments: list[Alignment | None]


__all__ = ["AXES", "MAP_PARTS", "Alignment", "BeamNode", "Exploration", "HeadMaps", "Labelled", "ReadingResult",
           "Translation"]
