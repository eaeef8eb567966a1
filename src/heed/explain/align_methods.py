"""Ways of reading a word alignment off attention, the baselines they must beat, and AER over them.

The teacher-forced pass gives, for every layer and head, token attention `(tgt_len + 1, src_len)`:
row k is the step whose decoder input is target token k - 1 (row 0 reads <s>) and which predicts
token k (row tgt_len predicts </s>). From that stack an `AlignOptions` picks:

- which attention: one layer or the mean of all layers, one head or the mean of the heads (an RNN
  has one layer of one head; a Transformer aligns by default with its last decoder layer, the
  mean of its heads);
- which rows (the method):
    argmax  target token k is linked by the row that *predicts* it (row k), as heed always did;
    shift   shift-att (Chen et al. 2020, "Accurate Word Alignment Induction from Neural Machine
            Translation"): by the row whose *input* is token k (row k + 1), the step that has
            just read the word; Chen et al. measure it 10-20 AER points better on Transformers;
- the target units: whitespace `words` (the Pharaoh convention), or the target's `chars` (spaces
  left out; what the generated dates task's gold alignments are written in);

- how a source word's pieces join (`join`): summed (a word's weight is the chance of looking at any
  of its pieces, heed.explain.align.word_attention's way) or their largest;
- when a target unit is left unlinked (`null_threshold`, null links): a gold leaves words aligned
  to nothing (function words, punctuation, the dates task's "-"), and a diffuse row is the model
  saying it looked nowhere in particular. A unit whose best source word holds less than
  `null_threshold` of the row's weight on the source's words gets no link; 0 links every unit.

then links every target unit to the source word with the most weight (heed.explain.align.hard_alignment). Source units are always
whitespace words.

Baselines that need no model: `diagonal_alignment` (target unit j -> source word
round(j * |src| / |tgt|)) and any Pharaoh file (a fast_align run). `symmetrize` joins a forward
and a reverse model's links (intersection, union, grow-diag-final-and; Koehn et al. 2005).
heed.explain.align.AerCounts adds AER up sentence by sentence, so a sweep over every layer x head x method
keeps counts, not matrices.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import numpy as np

from heed.data.units import Units, char_token_index
from heed.explain.align import Link, source_word_sum, target_word_mean

Method = Literal["argmax", "shift"]
Weights = Literal["attention", "value_norm", "rollout", "alti", "alignment_layer"]
WEIGHTS: tuple[Weights, ...] = ("attention", "value_norm", "rollout", "alti", "alignment_layer")
# The weights of a model's alignment layer (model.alignment_layer, heed.nn.transformer.alignment_layer):
# one layer beside the decoder's, so no decoder layer to choose.
ALIGNMENT_LAYER: Weights = "alignment_layer"
# Readings of what every head of every earlier layer contributed (heed.explain.contributions): one
# per decoder layer, all heads mixed, so no head of their own to choose.
THROUGH_LAYERS: tuple[Weights, ...] = ("rollout", "alti")
WEIGHT_NAMES: dict[Weights, str] = {"attention": "attention", "value_norm": "value norms", "rollout": "rollout",
                                    "alti": "ALTI+", "alignment_layer": "the alignment layer"}
Join = Literal["sum", "max"]
JOINS: tuple[Join, ...] = ("sum", "max")
# The thresholds training measures on its dev gold (heed.train.alignment): 0 (every unit linked)
# first, so that it wins ties.
NULL_THRESHOLDS: tuple[float, ...] = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
Symmetrize = Literal["intersect", "union", "grow-diag-final"]
METHODS: tuple[Method, ...] = ("argmax", "shift")
SYMMETRIZE: tuple[Symmetrize, ...] = ("intersect", "union", "grow-diag-final")
MEAN: Literal["mean"] = "mean"  # a layer or head "index" that means the average over all of them
# grow-diag-final's neighbours of a link (source, target): the 8 cells around it
NEIGHBOURS: tuple[tuple[int, int], ...] = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


@dataclass(frozen=True)
class AlignOptions:
    """How to read links off attention (see the module doc).

    layer:   a decoder layer (0-based), "mean" (all layers' average) or None (the model's own
             alignment layer: the last for a Transformer, the only one for an RNN)
    head:    a head (0-based), a tuple of heads (their mean: the heads guided alignment trained),
             or None / "mean" for the mean of the layer's heads
    weights: "attention" (the weights as they are) or "value_norm": each weight times the norm of
             what its source position adds through its head (Kobayashi et al. 2020), a reading of
             contributions, not of weights; the heads' mean then favours the heads that move more;
             "rollout" (Abnar & Zuidema 2020) or "alti" (ALTI+, Ferrando et al. 2022): what each
             source token contributed to the prediction through every layer up to `layer`, all
             heads mixed (heed.explain.contributions), so `head` must be left unset;
             "alignment_layer": the weights of the model's alignment layer (Garg et al. 2019's
             full-context layer, trained to align: heed.nn.transformer.alignment_layer), whose heads
             `head` chooses, `layer` left unset
    join:    how a source word's pieces join: "sum" (default) or "max" (its sharpest piece)
    null_threshold: in [0, 1]; a target unit whose largest weight on a source word is less than
             this share of its row's weight on the source's words is left unlinked (0: every unit
             linked, as heed always did)
    """

    method: Method = "argmax"
    layer: int | Literal["mean"] | None = None
    head: int | tuple[int, ...] | Literal["mean"] | None = None
    tgt_units: Units = "words"
    weights: Weights = "attention"
    join: Join = "sum"
    null_threshold: float = 0.0

    def __post_init__(self) -> None:
        check_null_threshold(self.null_threshold)
        if self.join not in JOINS:
            raise ValueError(f"join must be one of {', '.join(JOINS)}, got {self.join!r}")
        if self.method not in METHODS:
            raise ValueError(f"alignment method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.tgt_units not in ("words", "chars"):
            raise ValueError(f"tgt_units must be 'words' or 'chars', got {self.tgt_units!r}")
        if self.weights not in WEIGHTS:
            raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}, got {self.weights!r}")
        if self.weights in THROUGH_LAYERS and self.head not in (None, MEAN):
            raise ValueError(f"{WEIGHT_NAMES[self.weights]} mixes every head of every layer; choose a layer, not "
                             f"a head (got head {self.head!r})")
        if self.weights == ALIGNMENT_LAYER and self.layer is not None:
            raise ValueError(f"the alignment layer is one layer beside the decoder's; choose no layer (got layer "
                             f"{self.layer!r})")
        if self.layer not in (None, MEAN) and not _is_index(self.layer):
            raise ValueError(f"layer must be a 0-based index or 'mean', got {self.layer!r}")
        if isinstance(self.head, tuple):
            if not self.head or not all(map(_is_index, self.head)):
                raise ValueError(f"heads must be 0-based indices, got {self.head!r}")
        elif self.head not in (None, MEAN) and not _is_index(self.head):
            raise ValueError(f"head must be a 0-based index or 'mean', got {self.head!r}")

    @property
    def default_attention(self) -> bool:
        """Whether this reads the attention every model gives (its alignment layer, heads averaged, as weights)."""
        return self.layer is None and self.head in (None, MEAN) and self.weights == "attention"

    def describe(self, head_grid: tuple[int, int] | None = None) -> str:
        """'shift-att, layer 2, head 0' style, for tables and messages; with a model's (layers,
        heads) of (1, 1) (an RNN) just the method and 'the attention'."""
        method = "shift-att" if self.method == "shift" else "argmax"
        if self.weights in THROUGH_LAYERS:
            layer = ("the last decoder layer" if self.layer is None else "each decoder layer's, averaged"
                     if self.layer == MEAN else f"up to decoder layer {self.layer}")
            return f"{method}, {WEIGHT_NAMES[self.weights]} {layer}{self._words()}"
        if self.weights == ALIGNMENT_LAYER:
            head = ("mean of heads" if self.head in (None, MEAN) else f"head {self.head}" if isinstance(self.head, int)
                    else f"mean of heads {', '.join(map(str, self.head))}")
            return f"{method}, the alignment layer, {head}{self._words()}"
        weighed = ", weighed by value norms" if self.weights == "value_norm" else ""
        if head_grid == (1, 1):
            return f"{method}, the attention{weighed}{self._words()}"
        return f"{method}, {self.selection()}{weighed}{self._words()}"

    def _words(self) -> str:
        """How pieces join and when a unit stays unlinked, where not the default."""
        joined = ", pieces' max" if self.join == "max" else ""
        return joined + (f", unlinked below {self.null_threshold:g}" if self.null_threshold > 0 else "")

    def selection(self) -> str:
        """Which heads this reads: 'layer 2, head 0', 'all layers, mean of heads 1, 3' style."""
        layer = ("the alignment layer (the last decoder layer)" if self.layer is None
                 else "all layers" if self.layer == MEAN else f"layer {self.layer}")
        head = ("mean of heads" if self.head in (None, MEAN) else f"head {self.head}" if isinstance(self.head, int)
                else f"mean of heads {', '.join(map(str, self.head))}")
        return f"{layer}, {head}"


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_null_threshold(value: Any, name: str = "null threshold") -> None:
    """ValueError in one line unless `value` is a number in [0, 1] (NaN and infinities are not)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not 0.0 <= value <= 1.0:  # NaN fails both comparisons
        raise ValueError(f"{name} must be a number in [0, 1] (a share of a row's weight), got {value!r}")


def recorded_options(reading: Mapping[str, Any], tgt_units: Units | None = None) -> AlignOptions:
    """The AlignOptions of a reading training recorded (heed.json's "alignment": method, layer, head,
    weights, units, and since null links join and null_threshold, which older directories lack: sum
    and 0), in `tgt_units` (default: the recorded units). ValueError, KeyError or TypeError for an
    entry heed did not write."""
    head = reading["head"]
    return AlignOptions(method=reading["method"], layer=reading["layer"],
                        head=tuple(head) if isinstance(head, list) else head,
                        weights=reading["weights"], tgt_units=tgt_units or reading["units"],
                        join=reading.get("join", "sum"), null_threshold=reading.get("null_threshold", 0.0))


@overload
def parse_index(text: str | None, name: str, *, several: Literal[False] = False) -> int | Literal["mean"] | None: ...


@overload
def parse_index(text: str | None, name: str, *, several: bool) -> int | tuple[int, ...] | Literal["mean"] | None: ...


def parse_index(text: str | None, name: str, *, several: bool = False) -> int | tuple[int, ...] | Literal["mean"] | None:
    """A --layer / --head value: None, "mean" or a non-negative integer, and with `several` also
    indices joined by commas ("0,3": their mean); ValueError naming `name` otherwise."""
    if text is None:
        return None
    if text.strip().lower() == MEAN:
        return MEAN
    expected = "a 0-based index" + (", indices joined by commas (0,3)" if several else "") + " or 'mean'"
    parts = text.split(",") if several else [text]
    try:
        values = tuple(int(part) for part in parts)
    except ValueError:
        raise ValueError(f"{name} must be {expected}, got {text!r}") from None
    if any(v < 0 for v in values) or len(set(values)) != len(values):
        raise ValueError(f"{name} must be {expected}, got {text!r}")
    return values[0] if len(values) == 1 else values


def check_selection(options: AlignOptions, layers: int, heads: int) -> None:
    """ValueError naming --layer / --head when `options` asks for one the model does not have."""
    if isinstance(options.layer, int) and options.layer >= layers:
        raise ValueError(f"--layer {options.layer} does not exist: the model has {layers} decoder "
                         f"layer{'s' if layers != 1 else ''} with attention (0..{layers - 1}, or 'mean')")
    for head in options.head if isinstance(options.head, tuple) else (options.head,):
        if isinstance(head, int) and head >= heads:
            raise ValueError(f"--head {head} does not exist: the model has {heads} head"
                             f"{'s' if heads != 1 else ''} per layer (0..{heads - 1}, or 'mean')")


def select_attention(stack: np.ndarray, options: AlignOptions, default_layer: int) -> np.ndarray:
    """stack (layers, heads, rows, src_len) -> the attention `options` picks, (rows, src_len)."""
    check_selection(options, stack.shape[0], stack.shape[1])
    if options.weights == ALIGNMENT_LAYER:  # the stack is the alignment layer's one layer
        default_layer = 0
    layer = default_layer if options.layer is None else options.layer
    by_layer = stack.mean(axis=0) if layer == MEAN else stack[layer]  # (heads, rows, src_len)
    if isinstance(options.head, tuple):
        return by_layer[list(options.head)].mean(axis=0)
    return by_layer.mean(axis=0) if options.head in (None, MEAN) else by_layer[options.head]


def method_rows(token_attention: np.ndarray, method: Method) -> np.ndarray:
    """(..., tgt_len + 1, src_len) with the </s> row -> (..., tgt_len, src_len): row k for token k
    (argmax: the row predicting it) or row k + 1 (shift: the row reading it)."""
    return token_attention[..., :-1, :] if method == "argmax" else token_attention[..., 1:, :]


@dataclass(frozen=True)
class UnitMaps:
    """How one sentence pair's tokens map onto the alignment's units.

    src_sum:  (src_len, src_words) one-hot: a source word's weight is the sum over its pieces
    tgt_mean: (tgt_units, tgt_len): a target unit's row is the mean of its tokens' rows (a word of
              several pieces) or its token's row (a character inside a piece)
    """

    src_sum: np.ndarray
    tgt_mean: np.ndarray

    @classmethod
    def build(cls, src_word_ids: Sequence[int | None], tgt_word_ids: Sequence[int | None],
              tgt_tokens: Sequence[str], tgt_text: str, units: Units) -> UnitMaps:
        src_sum = source_word_sum(src_word_ids)
        if units == "chars":
            owners = char_token_index(tgt_tokens, tgt_text)
            tgt_mean = np.zeros((len(owners), len(tgt_tokens)))
            tgt_mean[np.arange(len(owners)), owners] = 1.0
        else:
            tgt_mean = target_word_mean(tgt_word_ids)
        return cls(src_sum, tgt_mean)

    def lift(self, token_attention: np.ndarray, join: Join = "sum") -> np.ndarray:
        """(..., tgt_len, src_len) token attention -> (..., tgt_units, src_words); a source word's
        pieces summed, or with join="max" their largest."""
        rows = self.tgt_mean @ token_attention  # (..., tgt_units, src_len)
        if join == "sum":
            return rows @ self.src_sum
        out = np.zeros((*rows.shape[:-1], self.src_sum.shape[1]))  # (..., tgt_units, src_words)
        for word in range(self.src_sum.shape[1]):
            pieces = np.flatnonzero(self.src_sum[:, word])
            if pieces.size:
                out[..., word] = rows[..., pieces].max(axis=-1)
        return out


def diagonal_alignment(n_src: int, n_tgt: int) -> list[Link]:
    """The baseline that reads no model: target unit j -> source word round(j * n_src / n_tgt)
    (halves rounded up), kept inside the sentence. Nothing when either side is empty."""
    if n_src <= 0 or n_tgt <= 0:
        return []
    return [(min(int(np.floor(j * n_src / n_tgt + 0.5)), n_src - 1), j) for j in range(n_tgt)]


def symmetrize(forward: Iterable[Link], backward: Iterable[Link], how: Symmetrize) -> set[Link]:
    """Join a forward (source -> target) and a backward model's links, both as (src_i, tgt_j).

    intersect: links both agree on (high precision); union: either (high recall);
    grow-diag-final: Koehn et al. 2005 (grow-diag-final-and, as Moses): start from the
    intersection, add union links next to an existing one (8 neighbours) whose source or target
    word is still unaligned, repeat; then add union links whose both words are still unaligned."""
    f, b = set(forward), set(backward)
    if how == "intersect":
        return f & b
    if how == "union":
        return f | b
    if how != "grow-diag-final":
        raise ValueError(f"symmetrize must be one of {', '.join(SYMMETRIZE)}, got {how!r}")
    union, links = f | b, f & b
    aligned_src = {i for i, _ in links}
    aligned_tgt = {j for _, j in links}
    grown = True
    while grown:
        grown = False
        for i, j in sorted(links):
            for di, dj in NEIGHBOURS:
                cand = (i + di, j + dj)
                if cand in union and cand not in links and (cand[0] not in aligned_src or cand[1] not in aligned_tgt):
                    links.add(cand)
                    aligned_src.add(cand[0])
                    aligned_tgt.add(cand[1])
                    grown = True
    for directional in (f, b):  # final-and
        for i, j in sorted(directional):
            if i not in aligned_src and j not in aligned_tgt:
                links.add((i, j))
                aligned_src.add(i)
                aligned_tgt.add(j)
    return links
