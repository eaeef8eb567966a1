"""Given sentence pairs made ready for a teacher-forced pass, from a model's codec alone (no
Translator): tokens cut to the model's source length, target tokens the model knows, batches of
them, the precision a bf16 model reads them in, and a model whose passes stop on request. What
every reading of heed.explain.readings starts from."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from heed.data.batching import Batch, collate, specials_of
from heed.data.codec import Codec
from heed.data.corpus import text_problem
from heed.data.vocab import SPECIALS, UNK
from heed.errors import Abandoned, HeedError


class Subject(NamedTuple):
    """A model as a reading reads it: the model (a heed.nn.protocol model, an ensemble or an
    export), its codec, and the device its inputs go to."""

    model: Any
    codec: Codec
    device: torch.device


@dataclass(frozen=True)
class ForcedPairs:
    """Sentence pairs as a teacher-forced pass reads them.

    src_tokens: per pair, the source tokens (cut to max_src_len), without </s>
    tgt_tokens: per pair, the target tokens (a text tokenized as a reference, or tokens given), without </s>
    examples:   per pair, (source ids, target ids)
    """

    src_tokens: list[list[str]]
    tgt_tokens: list[list[str]]
    examples: list[tuple[list[int], list[int]]]

    def __len__(self) -> int:
        return len(self.examples)

    def batches(self, model: Any, device: torch.device, batch_size: int) -> Iterator[tuple[list[int], Batch]]:
        """(the pairs' indices, their collated Batch on `device`), `batch_size` pairs at a time, in order."""
        for start in range(0, len(self.examples), batch_size):
            group = list(range(start, min(start + batch_size, len(self.examples))))
            yield group, collate([self.examples[k] for k in group], group, specials_of(model)).to(device)

    def sizes(self, k: int) -> tuple[int, int]:
        """(source positions, target rows) of pair k: its tokens and </s> each side."""
        return len(self.examples[k][0]) + 1, len(self.examples[k][1]) + 1


def check_texts(texts: Sequence[str], name: str) -> None:
    """A HeedError naming `name[k]` for a text that is not a str or holds what no sentence can (a lone
    UTF-16 surrogate, a control character): tokenizers would fail on it with their own errors."""
    for k, text in enumerate(texts):
        if not isinstance(text, str):
            raise HeedError(f"{name}[{k}]: expected a string, got {type(text).__name__}")
        problem = text_problem(text)
        if problem is not None:
            raise HeedError(f"{name}[{k}]: {problem}")


def known_target_ids(codec: Codec, tokens: Sequence[str], source: Sequence[str], where: str) -> list[int]:
    """The target ids of `tokens`, each a token of the target vocabulary (or `<unk>` itself; a copy
    model's, also one of `source`); a HeedError naming `where` and the first that is not, or a
    special token (`<pad>`, `<s>`, `</s>`): reading either as `<unk>` would explain something the
    user did not ask about."""
    unk = SPECIALS[UNK]
    vocab = codec.target_vocab(source)
    for token in tokens:
        known = isinstance(token, str) and (
            token == unk or token in vocab.unknowns or (token in vocab.target and token not in SPECIALS))
        if not known:
            raise HeedError(f"{where}: {token!r} is not a token of the model's target vocabulary"
                            + (" nor of its source" if codec.copy else ""))
    return vocab.encode(tokens)


def forced_pairs(codec: Codec, src_texts: Sequence[str], tgt_texts: Sequence[str | Sequence[str]], *,
                 max_src_len: int | None = None, empty: str) -> ForcedPairs:
    """`src_texts[k]` with `tgt_texts[k]` (a text, or its tokens) ready for a teacher-forced pass. A
    HeedError names `src_texts[k]` for an empty source (`empty` says why that matters),
    `src_texts[k]` / `tgt_texts[k]` for a text no sentence can hold, and `tgt_texts[k]` for a target
    token the model does not know (as a prefix's)."""
    if isinstance(src_texts, str) or isinstance(tgt_texts, str):
        raise TypeError("this takes lists of sentences; wrap a single one in a list")
    if len(src_texts) != len(tgt_texts):
        raise HeedError(f"{len(src_texts)} source sentences but {len(tgt_texts)} translations; give one "
                        "translation per source")
    check_texts(src_texts, "src_texts")
    for k, target in enumerate(tgt_texts):
        if isinstance(target, str):
            problem = text_problem(target)
            if problem is not None:
                raise HeedError(f"tgt_texts[{k}]: {problem}")
    src_tokens = [codec.src_tokens(t)[:max_src_len] for t in src_texts]
    tgt_tokens = [codec.tgt_tokens(t) if isinstance(t, str) else list(t) for t in tgt_texts]
    for k, tokens in enumerate(src_tokens):
        if not tokens:
            raise HeedError(f"src_texts[{k}] is empty: {empty}")
    examples = [(codec.src_ids(s), known_target_ids(codec, t, s, f"tgt_texts[{k}]"))
                for k, (s, t) in enumerate(zip(src_tokens, tgt_tokens))]
    return ForcedPairs(src_tokens, tgt_tokens, examples)


def precision(model: Any, device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast for a model whose weights are bf16 (float32 inputs such as fresh states meet
    bf16 weights), as heed.api.Translator decodes a bf16 model; nothing otherwise."""
    for member in getattr(model, "members", None) or [model]:  # an ensemble's models, or the model
        parameters = getattr(member, "parameters", None)
        first = next(iter(parameters()), None) if callable(parameters) else None
        if first is not None and first.dtype == torch.bfloat16:
            return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


class Stoppable:
    """A model whose every step, and teacher-forced pass, first asks `stop()`, raising Abandoned once
    it is true (the server stops the work of a request past its time limit). Everything else is the
    model's own."""

    def __init__(self, model: Any, stop: Callable[[], bool]) -> None:
        self._model, self._stop = model, stop

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def _check(self) -> None:
        if self._stop():
            raise Abandoned()

    def step(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return self._model.step(*args, **kwargs)

    def step_features(self, *args: Any, **kwargs: Any) -> Any:
        """A step up to the output layer (a shortlist's search: heed.search.shortlist)."""
        self._check()
        return self._model.step_features(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return self._model(*args, **kwargs)


class Reporting:
    """A Transformer whose search steps report `report`'s cross-attention (a decoder layer, some of
    its heads averaged: TransformerSeq2Seq.step) instead of its alignment layer's heads' mean, so
    that a reading of those weights comes off the search (heed.markup.carry.own_links). Everything
    else, the logits included, is the model's own."""

    def __init__(self, model: Any, report: tuple[int, tuple[int, ...] | None]) -> None:
        self._model, self._report = model, report

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def step(self, prev_tokens: Any, state: Any, enc: Any) -> Any:
        return self._model.step(prev_tokens, state, enc, report=self._report)

    def step_features(self, prev_tokens: Any, state: Any, enc: Any) -> Any:
        """A step up to the output layer (a shortlist's search: heed.search.shortlist)."""
        return self._model.step_features(prev_tokens, state, enc, report=self._report)


def search_report(model: Any, options: Any) -> tuple[int, tuple[int, ...] | None] | None:
    """The (decoder layer, heads) whose cross-attention a Transformer's search reports, when asked
    (Reporting; TransformerSeq2Seq.step's `report`), as the reading `options` (an AlignOptions):
    the attention weights of one layer, one head or several averaged (a guided head). None for any
    other reading or model."""
    from heed.explain.align_methods import MEAN
    from heed.nn.transformer.model import TransformerSeq2Seq

    if options.weights != "attention" or options.layer == MEAN or not isinstance(model, TransformerSeq2Seq):
        return None
    layer = model.alignment_layer if options.layer is None else int(options.layer)
    head = options.head
    heads = None if head is None or head == MEAN else tuple(head) if isinstance(head, tuple) else (int(head),)
    return layer, heads


__all__ = ["ForcedPairs", "Reporting", "Stoppable", "Subject", "check_texts", "forced_pairs", "known_target_ids", "precision",
           "search_report"]
