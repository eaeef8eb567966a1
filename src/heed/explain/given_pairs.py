"""What is read off given sentence pairs for word alignment, the model reading each translation as
its own output (teacher forcing), over the model alone (model, codec, device; never heed.api's
Translator): word alignments (`align_pairs`) and the AER of every reading (`align_sweep`), and how
far two models' attention is apart (`attention_gap_of`). heed.api.Translator's methods of the same
names call these with its model, codec and device. The readings of heed.explain.readings (every
head, attribution, contrast, source shares, the logit lens, ...) are modules of their own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from heed.data.codec import Codec
from heed.data.corpus import normalize
from heed.data.units import Units, unit_count
from heed.errors import HeedError
from heed.explain.align import Link
from heed.explain.align_methods import AlignOptions, check_selection
from heed.explain.attention_gap import AttentionGap, attention_gap
from heed.explain.forced import SweepResult, attention_shape, forced_attention, links_of, sweep
from heed.explain.pairs import Stoppable, Subject, check_texts, precision
from heed.results import Alignment


def align_pairs(
    model: Any,
    codec: Codec,
    device: torch.device,
    src_texts: Sequence[str],
    tgt_texts: Sequence[str],
    *,
    options: AlignOptions | None = None,
    batch_size: int = 64,
    stop: Callable[[], bool] | None = None,
) -> list[Alignment]:
    """Word alignments of given translations: `tgt_texts[k]` is fed to the decoder as if it
    were the model's own output (teacher forcing, one pass per batch), and the attention of
    that pass, lifted to whitespace words, gives each target word's source word.

    `options` (heed.explain.align_methods.AlignOptions): the method (argmax, or shift-att), the layer
    and head (default: the model's alignment layer, the mean of its heads) and the target units
    (words, or characters). A layer or head of its own needs a PyTorch model, not an ensemble
    or an export. Sentences are batched longest source first and put back in input order. An
    empty source or target gives an alignment with no links without running the model."""
    options = options or AlignOptions()
    check_align_inputs(model, src_texts, tgt_texts, batch_size)
    heads = not options.default_attention
    layers, n_heads, default_layer = attention_shape(model) if heads else (1, 1, 0)
    try:
        check_selection(options, layers, n_heads)
    except ValueError as e:
        raise HeedError(str(e)) from None
    reader = model if stop is None else Stoppable(model, stop)
    out: list[Alignment | None] = [None] * len(src_texts)
    try:
        for k, pair in forced_attention(
            reader,
            codec,
            src_texts,
            tgt_texts,
            device=device,
            batch_size=batch_size,
            heads=heads,
            weights=options.weights,
            context=lambda: precision(model, device),
        ):
            src_words, tgt_words = normalize(src_texts[k]).split(), normalize(tgt_texts[k]).split()
            if pair is None:
                units = unit_count(tgt_texts[k], options.tgt_units)
                out[k] = Alignment(src_words, tgt_words, np.zeros((units, len(src_words)), np.float32), [])
                continue
            maps = pair.unit_maps(codec, tgt_texts[k], options.tgt_units)
            matrix, links = links_of(pair, maps, options, default_layer)
            out[k] = Alignment(src_words, tgt_words, matrix.astype(np.float32), links)
    except ValueError as e:  # a selection the model lacks, or tokens that do not spell their characters
        raise HeedError(str(e)) from None
    return [a for a in out if a is not None]


def align_sweep(
    model: Any,
    codec: Codec,
    device: torch.device,
    src_texts: Sequence[str],
    tgt_texts: Sequence[str],
    sure: Sequence[set[Link]],
    possible: Sequence[set[Link]],
    *,
    tgt_units: Units = "words",
    batch_size: int = 64,
) -> SweepResult:
    """AER against gold links (`sure[k]`, `possible[k]` for pair k) of every way to read an
    alignment off this model: argmax and shift-att, for every decoder layer and their mean,
    every head and their mean (heed.explain.forced.SweepResult), with the diagonal baseline. An
    ensemble or an exported model has one reading per method: its reported attention."""
    check_align_inputs(model, src_texts, tgt_texts, batch_size)
    if not len(sure) == len(possible) == len(src_texts):
        raise HeedError(f"{len(src_texts)} sentence pairs but {len(sure)} gold alignments; give one per pair")
    try:
        return sweep(
            model,
            codec,
            src_texts,
            tgt_texts,
            sure,
            possible,
            units=tgt_units,
            device=device,
            batch_size=batch_size,
            context=lambda: precision(model, device),
        )
    except ValueError as e:
        raise HeedError(str(e)) from None


def attention_gap_of(
    mine: Subject,
    other: Subject,
    src_texts: Sequence[str],
    tgt_texts: Sequence[str],
    *,
    batch_size: int = 64,
) -> AttentionGap:
    """How far `other`'s attention is from `mine`'s when both read `tgt_texts[k]` as their output
    for `src_texts[k]` (heed.explain.attention_gap): e.g. an int8 export's beside the float32 model
    it was exported from. Each side's reported attention (a Transformer's last decoder layer, heads
    averaged); the two must share tokenizers and vocabularies."""
    check_align_inputs(mine.model, src_texts, tgt_texts, batch_size)
    if not other.model.has_attention:
        raise HeedError("the other model has no attention to compare; use a model with attention")
    difference = mine.codec.difference(other.codec)
    if difference is not None:
        raise HeedError(
            f"the two models' {difference} differ; their attention can only be compared cell by cell "
            "over the same tokens (an export of the same model, another checkpoint of its run)"
        )
    try:
        return attention_gap(
            forced_matrices(*mine, src_texts, tgt_texts, batch_size),
            forced_matrices(*other, src_texts, tgt_texts, batch_size),
        )
    except ValueError as e:
        raise HeedError(str(e)) from None


def forced_matrices(
    model: Any, codec: Codec, device: torch.device, src_texts: Sequence[str], tgt_texts: Sequence[str], batch_size: int
) -> list[np.ndarray | None]:
    """Each pair's reported attention (tgt_len + 1, src_len) under teacher forcing, None for an
    empty side."""
    out: list[np.ndarray | None] = [None] * len(src_texts)
    for k, pair in forced_attention(
        model,
        codec,
        src_texts,
        tgt_texts,
        device=device,
        batch_size=batch_size,
        heads=False,
        context=lambda: precision(model, device),
    ):
        if pair is not None:
            out[k] = pair.attention[0, 0]
    return out


def check_given(src_texts: Sequence[str], tgt_texts: Sequence[Any] | None) -> None:
    """A TypeError for a single text where a list is due, a HeedError for a text no sentence can
    hold or for translations not one per source (None: the model's own, to be decoded)."""
    if isinstance(src_texts, str) or isinstance(tgt_texts, str):
        raise TypeError("this takes lists of sentences; wrap a single one in a list")
    check_texts(src_texts, "src_texts")
    if tgt_texts is not None and len(tgt_texts) != len(src_texts):
        raise HeedError(
            f"{len(src_texts)} source sentences but {len(tgt_texts)} translations; give one translation per source"
        )


def check_align_inputs(model: Any, src_texts: Sequence[str], tgt_texts: Sequence[str], batch_size: int) -> None:
    if isinstance(src_texts, str) or isinstance(tgt_texts, str):
        raise TypeError("align() takes lists of sentences; wrap a single one in a list")
    if len(src_texts) != len(tgt_texts):
        raise HeedError(
            f"{len(src_texts)} source sentences but {len(tgt_texts)} translations; give one translation per source"
        )
    check_texts(src_texts, "src_texts")
    check_texts(tgt_texts, "tgt_texts")
    if not model.has_attention:
        raise HeedError("this model has no attention, so it has no alignments; use a model with attention")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
