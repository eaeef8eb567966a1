"""Alignments of given translations: the model reads `tgt` as its own output (forced decoding) and
its attention over `src`, lifted to words (heed.explain.align_methods), links each target unit to a source
word. Used by `Translator.align` / `Translator.align_sweep` (heed align) and by the trainer's dev AER.

One teacher-forced pass per batch gives the attention stack `(layers, heads, tgt_len + 1, src_len)`
of every pair: with the </s> row (shift-att reads the last token there), without the source's
</s> column (the end of sentence is no word). A model that cannot give its heads one by one (an
ensemble, an exported model) gives its reported attention as one layer of one head.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from heed.data.batching import collate, specials_of
from heed.data.codec import Codec, DevGold
from heed.data.corpus import Pair, normalize
from heed.data.units import Units
from heed.explain.align import AerCounts, Link, hard_alignment
from heed.explain.align_methods import (
    JOINS,
    MEAN,
    METHODS,
    NULL_THRESHOLDS,
    THROUGH_LAYERS,
    WEIGHT_NAMES,
    AlignOptions,
    Join,
    Method,
    UnitMaps,
    Weights,
    diagonal_alignment,
    method_rows,
    select_attention,
)
from heed.explain.contributions import contributions
from heed.nn.protocol import ContributionModel, HeadsModel, ValueNormModel


@dataclass(frozen=True)
class ForcedPair:
    """One pair's tokens and its attention stack (layers, heads, len(tgt_tokens) + 1, len(src_tokens))."""

    src_tokens: list[str]
    tgt_tokens: list[str]
    attention: np.ndarray

    def unit_maps(self, codec: Codec, tgt_text: str, units: Units) -> UnitMaps:
        return UnitMaps.build(codec.src_tokenizer.word_ids(self.src_tokens), codec.tgt_tokenizer.word_ids(self.tgt_tokens),
                              self.tgt_tokens, normalize(tgt_text), units)


def attention_shape(model: Any) -> tuple[int, int, int]:
    """(layers, heads, default layer) of the attention `forced_attention` gives for `model`."""
    if isinstance(model, HeadsModel):
        return (*model.head_grid, model.alignment_layer)
    return 1, 1, 0


def forced_attention(model: Any, codec: Codec, src_texts: Sequence[str], tgt_texts: Sequence[str], *,
                     device: torch.device, batch_size: int, heads: bool, weights: Weights = "attention",
                     context: Callable[[], Any] | None = None) -> Iterator[tuple[int, ForcedPair | None]]:
    """(k, ForcedPair) for every pair k, in input order within each batch of longest sources; None
    for a pair with an empty side (nothing to align; the model is not run for it).

    heads: every layer's every head (the model must be a heed.nn.protocol.HeadsModel); else the
    attention the model reports (its alignment layer, heads averaged) as (1, 1, ...).
    weights (with heads): "value_norm" weighs each weight by the norm of its source position's
    value vector through its head (heed.nn.protocol.ValueNormModel; Kobayashi et al. 2020);
    "rollout" and "alti" give each decoder layer's source contributions instead, normalised per row
    (heed.explain.contributions; heed.nn.protocol.ContributionModel), as (layers, 1, ...)."""
    check_weights(model, weights, heads=heads)
    src_tokens = [codec.src_tokens(t) for t in src_texts]
    tgt_tokens = [codec.tgt_tokens(t) for t in tgt_texts]
    examples = [(codec.src_ids(s), codec.tgt_ids(t, s)) for s, t in zip(src_tokens, tgt_tokens)]
    for k, (s, t) in enumerate(examples):
        if not s or not t:
            yield k, None
    todo = sorted((k for k, (s, t) in enumerate(examples) if s and t), key=lambda k: -len(examples[k][0]))
    for start in range(0, len(todo), batch_size):
        group = todo[start : start + batch_size]
        batch = collate([examples[k] for k in group], group, specials_of(model)).to(device)
        with torch.inference_mode(), (context() if context else contextlib.nullcontext()):
            if weights in THROUGH_LAYERS:
                shares = contributions(model, batch.src, batch.src_lengths, batch.tgt_in, reading=weights)  # type: ignore[arg-type]
                stack = shares.alignment()[:, None]  # (L, 1, B, T+1, S+1)
            elif heads and weights == "value_norm":  # one encoding for the heads and the norms
                stack = model.value_weighted_heads(batch.src, batch.src_lengths, batch.tgt_in)  # (L, H, B, T+1, S+1)
            elif heads:
                stack = model.attention_heads(batch.src, batch.src_lengths, batch.tgt_in)  # (L, H, B, T+1, S+1)
            else:
                reported = model(batch.src, batch.src_lengths, batch.tgt_in).attention  # (B, T+1, S+1)
                assert reported is not None
                stack = reported[None, None]
        array = stack.float().cpu().numpy()
        for row, k in enumerate(group):
            n_src, n_tgt = len(examples[k][0]), len(examples[k][1])
            yield k, ForcedPair(src_tokens[k], tgt_tokens[k], array[:, :, row, : n_tgt + 1, :n_src])


def check_weights(model: Any, weights: Weights, *, heads: bool = True) -> None:
    """ValueError saying which model a reading needs, when `model` cannot give `weights`."""
    if heads and not isinstance(model, HeadsModel):
        raise ValueError("this model gives only its averaged attention (an ensemble, an exported model, or a family "
                         "without per-head maps); "
                         "choosing a layer or a head needs a PyTorch model directory of a family with them")
    if weights == "value_norm" and not (heads and isinstance(model, ValueNormModel)):
        raise ValueError("weighing attention by value norms needs each head's value vectors, which a Transformer "
                         "model directory gives (an RNN's attention, an ensemble or an export does not)")
    if weights in THROUGH_LAYERS and not (heads and isinstance(model, ContributionModel)):
        raise ValueError(f"{WEIGHT_NAMES[weights]} reads every attention block of the encoder and the decoder, which "
                         "a Transformer model directory gives (an RNN's one attention, an ensemble or an export "
                         "does not)")


def links_of(pair: ForcedPair, maps: UnitMaps, options: AlignOptions, default_layer: int) -> tuple[np.ndarray, list[Link]]:
    """The unit attention `(tgt_units, src_words)` `options` picks, and its argmax links (none for a
    unit whose row is more diffuse than `options.null_threshold` allows)."""
    matrix = maps.lift(method_rows(select_attention(pair.attention, options, default_layer), options.method),
                       options.join)
    return matrix, hard_alignment(matrix, options.null_threshold)


@dataclass
class SweepResult:
    """AER of every way of reading links, over one gold set.

    counts: AerCounts of every reading, by (weights, method, layer, head); `weights` holds
            "attention", and for a Transformer "value_norm", "rollout" and "alti" too (the last two
            mix the heads: only their head "mean")
    grid(method, weights): (layers + 1, heads + 1) AER, the last row the mean of all layers, the
            last column the mean of the heads (NaN where a reading has no such head)
    diagonal: AerCounts of the diagonal baseline"""

    layers: int
    heads: int
    default_layer: int
    weights: tuple[Weights, ...] = ("attention",)
    counts: dict[tuple[Weights, Method, int | str, int | str | tuple[int, ...]], AerCounts] = field(default_factory=dict)
    diagonal: AerCounts = field(default_factory=AerCounts)
    sentences: int = 0

    @property
    def head_grid(self) -> tuple[int, int]:
        return self.layers, self.heads

    def heads_of(self, weights: Weights) -> list[int | str]:
        """The head keys `weights` is read by: every head and their mean, or only the mean."""
        return [MEAN] if weights in THROUGH_LAYERS else [*range(self.heads), MEAN]

    def readings(self) -> Iterator[tuple[Weights, Method, int | str, int | str]]:
        for weights in self.weights:
            for method in METHODS:
                for layer in [*range(self.layers), MEAN]:
                    for head in self.heads_of(weights):
                        yield weights, method, layer, head

    def grid(self, method: Method, weights: Weights = "attention") -> np.ndarray:
        """(layers + 1, heads + 1) AER for `method` on `weights`; the last row/column are the means,
        NaN for a head `weights` has no reading of."""
        out = np.full((self.layers + 1, self.heads + 1), np.nan)
        for r, layer in enumerate([*range(self.layers), MEAN]):
            for c, head in enumerate([*range(self.heads), MEAN]):
                if (weights, method, layer, head) in self.counts:
                    out[r, c] = self.counts[(weights, method, layer, head)].aer
        return out

    def best(self) -> tuple[AlignOptions, float]:
        """The reading with the lowest AER (first in sweep order on ties)."""
        key = min(self.readings(), key=lambda k: self.counts[k].aer)
        weights, method, layer, head = key
        return (AlignOptions(method=method, layer=layer, head=head, weights=weights),  # type: ignore[arg-type]
                self.counts[key].aer)

    def aer(self, options: AlignOptions) -> float:
        layer = self.default_layer if options.layer is None else options.layer
        head = MEAN if options.head is None else options.head
        return self.counts[(options.weights, options.method, layer, head)].aer


def sweep(model: Any, codec: Codec, src_texts: Sequence[str], tgt_texts: Sequence[str],
          sure: Sequence[set[Link]], possible: Sequence[set[Link]], *, units: Units, device: torch.device,
          batch_size: int, context: Callable[[], Any] | None = None) -> SweepResult:
    """AER for every weighting (the weights, and value norms, rollout and ALTI+ where the model gives
    them) x method x layer (and their mean) x head (and their mean), and the diagonal. Each
    weighting is one teacher-forced pass over the pairs."""
    layers, heads, default_layer = attention_shape(model)
    heads_model = isinstance(model, HeadsModel)
    weights = sweep_weights(model)
    result = SweepResult(layers, heads, default_layer, weights)
    for key in result.readings():
        result.counts[key] = AerCounts()
    for weighting in weights:
        for k, pair in forced_attention(model, codec, src_texts, tgt_texts, device=device, batch_size=batch_size,
                                        heads=heads_model, weights=weighting, context=context):
            maps = None if pair is None else pair.unit_maps(codec, tgt_texts[k], units)
            if weighting == weights[0]:
                result.sentences += 1
                n_tgt = 0 if maps is None else maps.tgt_mean.shape[0]
                result.diagonal.add(diagonal_alignment(len(normalize(src_texts[k]).split()), n_tgt), sure[k],
                                    possible[k])
            _count_readings(result, weighting, pair, maps, sure[k], possible[k])
    return result


def sweep_weights(model: Any) -> tuple[Weights, ...]:
    """The weightings a sweep reads `model` by: the attention, and what else it gives."""
    out: list[Weights] = ["attention"]
    if isinstance(model, HeadsModel) and isinstance(model, ValueNormModel):
        out.append("value_norm")
    if isinstance(model, HeadsModel) and isinstance(model, ContributionModel):
        out.extend(THROUGH_LAYERS)
    return tuple(out)


def _count_readings(result: SweepResult, weights: Weights, pair: ForcedPair | None, maps: UnitMaps | None,
                    sure: set[Link], possible: set[Link]) -> None:
    """Add one pair's links under every method x layer x head of `weights` to the sweep's counts."""
    if pair is None or maps is None:
        for key in result.readings():
            if key[0] == weights:
                result.counts[key].add([], sure, possible)
        return
    for method in METHODS:
        rows = maps.lift(method_rows(pair.attention, method))  # (layers, heads, tgt_units, src_words)
        by_layer = np.concatenate([rows, rows.mean(axis=0, keepdims=True)])  # + all layers' mean
        full = np.concatenate([by_layer, by_layer.mean(axis=1, keepdims=True)], axis=1)  # + heads' mean
        for r, layer in enumerate([*range(result.layers), MEAN]):
            for head in result.heads_of(weights):
                c = -1 if head == MEAN else int(head)
                result.counts[(weights, method, layer, head)].add(hard_alignment(full[r, c]), sure, possible)


@dataclass
class WordRuleResult:
    """AER and link counts of one reading under every way of joining a source word's pieces
    (JOINS) x null threshold (NULL_THRESHOLDS), over one gold set: what training measures to
    choose `join` and `null_threshold` (heed.train.alignment) and bench/studies/null_links.py reports."""

    options: AlignOptions
    counts: dict[tuple[Join, float], AerCounts] = field(default_factory=dict)

    def best(self) -> tuple[AlignOptions, float]:
        """The lowest AER's options; ties go to the first in (JOINS x NULL_THRESHOLDS) order: sum, 0."""
        key = min(self.counts, key=lambda k: self.counts[k].aer)
        return replace(self.options, join=key[0], null_threshold=key[1]), self.counts[key].aer


def word_rules(model: Any, codec: Codec, pairs: Sequence[Pair], gold: DevGold, options: AlignOptions, *,
               device: torch.device, joins: Sequence[Join] = JOINS,
               thresholds: Sequence[float] = NULL_THRESHOLDS) -> WordRuleResult:
    """`options`' reading of `pairs` scored against `gold` under every join x null threshold, from
    one teacher-forced pass."""
    model.eval()
    options = replace(options, tgt_units=gold.units)
    heads = not options.default_attention
    default_layer = attention_shape(model)[2] if heads else 0
    result = WordRuleResult(options, {(j, t): AerCounts() for j in joins for t in thresholds})
    for k, pair in forced_attention(model, codec, [p.src for p in pairs], [p.tgt for p in pairs], device=device,
                                    batch_size=64, heads=heads, weights=options.weights):
        if pair is None:
            for counts in result.counts.values():
                counts.add([], gold.sure[k], gold.possible[k])
            continue
        maps = pair.unit_maps(codec, pairs[k].tgt, gold.units)
        rows = method_rows(select_attention(pair.attention, options, default_layer), options.method)
        for join in joins:
            matrix = maps.lift(rows, join)  # (tgt_units, src_words)
            for threshold in thresholds:
                result.counts[(join, threshold)].add(hard_alignment(matrix, threshold), gold.sure[k],
                                                     gold.possible[k])
    return result


def corpus_aer(model: Any, codec: Codec, pairs: Sequence[Pair], gold: DevGold, *, device: torch.device,
               options: AlignOptions | None = None) -> float | None:
    """The alignment error rate of `pairs` against `gold` (its sure and possible links, one set per
    pair, in `gold.units`), read as `options` say (default: heed align's default way, argmax of the
    reported attention). What training records at each evaluation; None with nothing to score."""
    model.eval()
    options = AlignOptions(tgt_units=gold.units) if options is None else replace(options, tgt_units=gold.units)
    heads = not options.default_attention
    default_layer = attention_shape(model)[2] if heads else 0
    counts = AerCounts()
    for k, pair in forced_attention(model, codec, [p.src for p in pairs], [p.tgt for p in pairs], device=device,
                                    batch_size=64, heads=heads, weights=options.weights):
        links = [] if pair is None else links_of(pair, pair.unit_maps(codec, pairs[k].tgt, gold.units), options,
                                                 default_layer)[1]
        counts.add(links, gold.sure[k], gold.possible[k])
    return counts.aer if counts.n_a + counts.n_s else None
