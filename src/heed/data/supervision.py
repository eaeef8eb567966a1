"""The word links of the training pairs, as token links: what guided alignment training supervises
(heed.train.alignment).

Links come between whitespace words (`i-j`, source first; the target may count characters
instead), from a Pharaoh file line-aligned with `data.train` as written or from a generated task.
The model attends between tokens, so each word link becomes the links between the word's pieces:
source word i -> every token of it (heed.data.tokenize.Tokenizer.word_ids), target unit j -> every
token of it (a word's pieces, or the one token that writes a character). The training loss then
spreads each target token's supervision evenly over its linked source tokens (Garg et al. 2019),
so a source word of five pieces weighs what a word kept whole does: attention summed over a word's
pieces is how heed reads a word's weight (heed.explain.align.word_attention).

TokenLinks keeps every pair's links in two flat arrays, whatever the corpus size:
    offsets  int64 (pairs + 1,)   pair k's links are rows offsets[k]:offsets[k + 1]
    links    int32 (total, 2)     (target position t, source position s): t is the row of tgt_out
                                  (the step that predicts target token t), s the source token;
                                  positions count tokens without specials
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from heed.config import DataConfig, GuidedAlignmentConfig
from heed.data.codec import Codec, Corpora
from heed.data.corpus import Pair
from heed.data.pharaoh import Link, read_gold_for
from heed.data.units import Units, char_token_index, unit_count
from heed.errors import DataError


@dataclass(frozen=True)
class TokenLinks:
    """Every training pair's token links (module doc)."""

    offsets: np.ndarray  # int64 (pairs + 1,)
    links: np.ndarray  # int32 (total, 2): (target position, source position)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, k: int) -> np.ndarray:
        """Pair k's links, (n, 2) int32 (target position, source position)."""
        return self.links[self.offsets[k] : self.offsets[k + 1]]

    @staticmethod
    def of(per_pair: Iterable[np.ndarray]) -> TokenLinks:
        arrays = list(per_pair)
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum([len(a) for a in arrays], out=offsets[1:])
        links = np.concatenate(arrays).astype(np.int32) if arrays else np.zeros((0, 2), np.int32)
        return TokenLinks(offsets, links.reshape(-1, 2))


WordIds = Callable[[list[str]], list["int | None"]]


def token_links(links: Iterable[Link], src_tokens: list[str], tgt_tokens: list[str], tgt_text: str, *,
                src_word_ids: WordIds, tgt_word_ids: WordIds, units: Units) -> np.ndarray:
    """One pair's word links (source word i, target unit j) -> its token links, (n, 2) int32 of
    (target position, source position), sorted. `tgt_text`: the target as the tokenizer read it
    (for `units` "chars": which token writes each character)."""
    src_of: dict[int, list[int]] = {}
    for s, word in enumerate(src_word_ids(src_tokens)):
        if word is not None:
            src_of.setdefault(word, []).append(s)
    tgt_of: dict[int, list[int]] = {}
    if units == "chars":
        for j, t in enumerate(char_token_index(tgt_tokens, tgt_text)):
            tgt_of.setdefault(j, []).append(t)
    else:
        for t, word in enumerate(tgt_word_ids(tgt_tokens)):
            if word is not None:
                tgt_of.setdefault(word, []).append(t)
    pairs = sorted({(t, s) for i, j in links for t in tgt_of.get(j, ()) for s in src_of.get(i, ())})
    return np.asarray(pairs, dtype=np.int32).reshape(-1, 2)


def read_supervision(path: Path, pairs: Sequence[Pair], *, lines: Sequence[int] | None, total: int,
                     reverse: bool, units: Units) -> list[set[Link]]:
    """The links of training pairs `pairs` from Pharaoh file `path`, one line per pair of
    data.train as written: `total` lines, pair k on line `lines[k]` (0-based; None: line k). Each
    pair's line (sure and possible links alike: a possible link is one an annotator accepts) is
    checked against it by heed.data.pharaoh.read_gold_for; with `reverse` the file aligns the corpus
    as written, so its links are turned round to the model's (source, target). A DataError names the
    file and line for a line count that differs, a link outside its pair, or a token that is not a link."""
    if reverse and units == "chars":
        raise DataError("units: chars counts the characters of the file's target side, which data.reverse "
                        "makes the model's source; give links between words", path=path)
    at = range(len(pairs)) if lines is None else lines
    sizes: list[tuple[int, int] | None] = [None] * total
    for line, pair in zip(at, pairs):
        written_src, written_tgt = (pair.tgt, pair.src) if reverse else (pair.src, pair.tgt)
        sizes[line] = (len(written_src.split()), unit_count(written_tgt, units))
    _, possible = read_gold_for(path, sizes, units=units, sides="data.train")
    return [{(j, i) for i, j in possible[line]} if reverse else possible[line] for line in at]


def training_links(data: DataConfig, guided: GuidedAlignmentConfig | None, corpora: Corpora, codec: Codec,
                   keep: Sequence[int]) -> TokenLinks | None:
    """The token links that supervise training pairs `keep` (indices into `corpora.train`, the pairs
    the length filter kept), from `guided.supervision`: the generated task's links, or a file
    (read_supervision). None for `self` (the model makes its own) or without guided alignment."""
    if guided is None or guided.supervision == "self":
        return None
    pairs = [corpora.train[k] for k in keep]
    if guided.supervision == "task":
        gold = corpora.train_gold
        assert gold is not None  # the config allows 'task' only with a generated task, which has its links
        links, units = [gold.possible[k] for k in keep], gold.units
    else:
        assert isinstance(guided.supervision, Path)
        lines = corpora.train_lines
        total = len(corpora.train) if corpora.train_read is None else corpora.train_read
        every = read_supervision(guided.supervision, corpora.train, lines=lines, total=total, reverse=data.reverse,
                                 units=guided.units)
        links, units = [every[k] for k in keep], guided.units
    return TokenLinks.of(token_links(pair_links, codec.src_tokens(pair.src), codec.tgt_tokens(pair.tgt), pair.tgt,
                                     src_word_ids=codec.src_tokenizer.word_ids,
                                     tgt_word_ids=codec.tgt_tokenizer.word_ids, units=units)
                         for pair_links, pair in zip(links, pairs))
