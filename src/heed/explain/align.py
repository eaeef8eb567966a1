"""Word alignments from attention: hard alignments, AER, unknown-word replacement (the Pharaoh
files they are read from and written to: heed.data.pharaoh).

Attention weights `(tgt_len, src_len)` are a soft alignment: row j says where output token j looked.
This module turns them into hard links, reads and writes them in the Pharaoh format that aligners
(GIZA++ symmetrised output, fast_align, eflomal) use, scores them against a gold standard with
the alignment error rate, and uses them to replace `<unk>` outputs. `word_attention` lifts
subword or character attention to whitespace words, the unit gold alignments are written in.

Pharaoh format: one sentence per line, links `i-j` separated by spaces, `i` the 0-based source
position and `j` the 0-based target position (source first). Gold standards also mark links that
annotators judged only *possible*; accepted spellings (Sure S is always a subset of Possible P):

    i-j     sure
    i-j-S   sure      (explicit)
    i-j-P   possible
    i?j     possible
    ipj     possible

The 1-based "LINE SRC TGT S|P" format of the 2003 NAACL shared task is not read here.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from heed.data.pharaoh import Link, read_text_lines
from heed.errors import DataError

# "▁", SentencePiece's word-start mark and the char tokenizer's space: heed.data.tokenize.SPACE,
# spelt out so that this module stays free of torch (heed.data imports it).
SPACE = "\u2581"



def weight_matrix(weights: Any, *, tgt_len: int | None = None, src_len: int | None = None) -> np.ndarray:
    """Attention weights as a float64 NumPy array `(tgt_len, src_len)`; accepts NumPy or torch.

    With `tgt_len` and `src_len` (the token counts) the shape is checked against them.
    """
    if hasattr(weights, "detach"):  # a torch.Tensor, without importing torch here
        weights = weights.detach().float().cpu().numpy()
    matrix = np.asarray(weights, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"attention weights must be 2-D (tgt_len, src_len), got shape {matrix.shape}")
    if tgt_len is not None and src_len is not None and matrix.shape != (tgt_len, src_len):
        raise ValueError(
            f"attention weights have shape {matrix.shape} but there are {tgt_len} output and "
            f"{src_len} source tokens: expected (tgt_len, src_len) = ({tgt_len}, {src_len})"
        )
    return matrix


def word_attention(
    weights: Any, src_word_ids: Sequence[int | None], tgt_word_ids: Sequence[int | None]
) -> np.ndarray:
    """Token attention `(tgt_len, src_len)` -> word attention `(tgt_words, src_words)`.

    `src_word_ids[i]` / `tgt_word_ids[j]`: the word token i / j belongs to, None for a token
    that belongs to no word (the char tokenizer's "▁" between words, a </s>); see
    `Tokenizer.word_ids`. Word counts are the largest id + 1.

    - Over the source, the pieces of a word are **summed**: attention is a distribution over
      positions, so the weight on a word is the probability of looking at any of its pieces, and
      a word split in five pieces is not outvoted by a word kept whole (as with max it could be
      by a single sharp piece, and as it would be by the mean).
    - Over the target, a word's row is the **mean** of its pieces' rows, so a row stays a
      distribution (sums to at most 1) whatever the word's piece count.

    Weight on tokens with no word (e.g. the </s> column) is dropped, not spread: rows then sum
    to less than 1. For word-level tokens (ids 0, 1, 2, ...) the matrix comes back unchanged.
    """
    matrix = weight_matrix(weights, tgt_len=len(tgt_word_ids), src_len=len(src_word_ids))
    return target_word_mean(tgt_word_ids) @ matrix @ source_word_sum(src_word_ids)  # (tgt_words, src_words)


def source_word_sum(src_word_ids: Sequence[int | None]) -> np.ndarray:
    """(src_len, src_words) one-hot: token attention @ it sums each word's pieces."""
    n_src = max((i for i in src_word_ids if i is not None), default=-1) + 1
    onehot = np.zeros((len(src_word_ids), n_src))
    for i, word in enumerate(src_word_ids):
        if word is not None:
            onehot[i, word] = 1.0
    return onehot


def target_word_mean(tgt_word_ids: Sequence[int | None]) -> np.ndarray:
    """(tgt_words, tgt_len): it @ token attention averages each word's rows."""
    n_tgt = max((j for j in tgt_word_ids if j is not None), default=-1) + 1
    mean = np.zeros((n_tgt, len(tgt_word_ids)))
    for j, word in enumerate(tgt_word_ids):
        if word is not None:
            mean[word, j] = 1.0
    pieces = mean.sum(axis=1, keepdims=True)  # (tgt_words, 1)
    return np.divide(mean, pieces, out=np.zeros_like(mean), where=pieces > 0)


def hard_alignment(weights: Any, null_threshold: float = 0.0) -> list[Link]:
    """For each target position j, the source position i it attends to most: `[(i, j), ...]`.

    `weights`: `(tgt_len, src_len)`. Pairs come in target order, source first (Pharaoh order).
    Ties go to the leftmost source position. Rows that are all zero (padding steps, which
    `masked_softmax` gives weights of exactly 0) get no link, and neither does a row whose largest
    weight is less than `null_threshold` of the row's sum (a null link: a diffuse row looks nowhere).
    """
    matrix = weight_matrix(weights)  # (tgt_len, src_len)
    best = matrix.argmax(axis=1)  # (tgt_len,)
    top = matrix.max(axis=1, initial=0.0)  # (tgt_len,)
    total = matrix.sum(axis=1)  # (tgt_len,)
    keep = (top != 0) & (top >= null_threshold * total)  # an all-zero row: no link whatever the threshold
    return [(i, j) for j, (i, k) in enumerate(zip(best.tolist(), keep.tolist())) if k]




















@dataclass
class AerCounts:
    """Running alignment error rate counts, added sentence by sentence (Och & Ney 2003, "A
    Systematic Comparison of Various Statistical Alignment Models", Computational Linguistics 29(1)):

        AER = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

    with A the hypothesis links, S the sure and P the possible gold links. S ⊆ P is enforced by
    using P ∪ S, so a gold file that lists a sure link only once still counts it as possible."""

    a_and_s: int = 0
    a_and_p: int = 0
    n_a: int = 0
    n_s: int = 0

    def add(self, hyp: Iterable[Link], sure: Iterable[Link], possible: Iterable[Link]) -> None:
        a, s = set(hyp), set(sure)
        p = set(possible) | s
        self.a_and_s += len(a & s)
        self.a_and_p += len(a & p)
        self.n_a += len(a)
        self.n_s += len(s)

    @property
    def precision(self) -> float:
        """|A ∩ P| / |A| (Och & Ney 2003); 1 with no hypothesis links (nothing claimed, nothing wrong)."""
        return self.a_and_p / self.n_a if self.n_a else 1.0

    @property
    def recall(self) -> float:
        """|A ∩ S| / |S| (Och & Ney 2003); 1 with no sure gold links."""
        return self.a_and_s / self.n_s if self.n_s else 1.0

    @property
    def aer(self) -> float:
        """0 is perfect, lower is better; ValueError when there is nothing to score."""
        if self.n_a + self.n_s == 0:
            raise ValueError("AER is undefined when there are no hypothesis and no sure gold links")
        return 1.0 - (self.a_and_s + self.a_and_p) / (self.n_a + self.n_s)


@dataclass(frozen=True)
class Agreement:
    """How one aligner's links agree with another's taken as reference (a silver measure where there
    is no gold, e.g. a model's reading against eflomal's links): precision |A & R| / |A|, recall
    |A & R| / |R| and their harmonic mean F1, over a whole corpus."""

    precision: float
    recall: float
    f1: float
    links: int  # |A|
    reference: int  # |R|


def agreement(hyp: Sequence[set[Link]], reference: Sequence[set[Link]]) -> Agreement:
    """The Agreement of `hyp` with `reference`, one link set per sentence each (0 where a side has
    no links)."""
    if len(hyp) != len(reference):
        raise ValueError(f"agreement needs one link set per sentence in each: got {len(hyp)} and {len(reference)}")
    common = sum(len(set(a) & set(r)) for a, r in zip(hyp, reference))
    n_a, n_r = sum(map(len, hyp)), sum(map(len, reference))
    precision = common / n_a if n_a else 0.0
    recall = common / n_r if n_r else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return Agreement(precision, recall, f1, n_a, n_r)


REVERSE_SHARED = 0.5  # at least this share of a side's tokens in the other model's vocabulary (see reverse_mismatch)


def reverse_mismatch(forward: Any, reverse: Any) -> str | None:
    """Why the codec `reverse` cannot be that of `forward`'s other direction (a model trained on the
    same language pair target -> source), or None when it can. The reverse's source vocabulary must
    hold at least REVERSE_SHARED of the forward's target tokens, and its target vocabulary of the
    forward's source tokens (specials left out). The two runs of `heed train --both-directions`
    share 98-100% (a split held out by source sentence differs a little); a reverse trained on
    another corpus of the same languages 35-41% of 4,000 pieces, a model trained the same way
    round 9-16%: bench/RESULTS.md, "Both directions"."""
    for mine, theirs, side, other_side in ((forward.tgt_vocab, reverse.src_vocab, "target", "source"),
                                           (forward.src_vocab, reverse.tgt_vocab, "source", "target")):
        every = mine.tokens
        tokens = set(every) - {every[i] for i in mine.specials}
        shared = len(tokens & set(theirs.tokens)) / max(len(tokens), 1)
        if shared < REVERSE_SHARED:
            return (f"its {other_side} vocabulary holds {100 * shared:.0f}% of this model's {side} tokens (at least "
                    f"{100 * REVERSE_SHARED:.0f}% for a model of the same corpus the other way round): another "
                    "language pair, another corpus's vocabulary, or the same direction")
    return None


def alignment_error_rate(
    hyp: Sequence[set[Link]], sure: Sequence[set[Link]], possible: Sequence[set[Link]]
) -> float:
    """Corpus alignment error rate of one link set per sentence (AerCounts summed over all of
    them). 0 is perfect; lower is better."""
    if not len(hyp) == len(sure) == len(possible):
        raise ValueError(
            f"AER needs one link set per sentence in each: got {len(hyp)} hypothesis, "
            f"{len(sure)} sure and {len(possible)} possible"
        )
    counts = AerCounts()
    for a, s, p in zip(hyp, sure, possible):
        counts.add(a, s, p)
    return counts.aer


def replace_unknowns(
    tgt_tokens: Sequence[str],
    src_tokens: Sequence[str],
    weights: Any,
    *,
    unk: str = "<unk>",
    dictionary: dict[str, str] | None = None,
) -> list[str]:
    """Replace each `unk` output with the source token it attended to most.

    Luong et al. 2015b ("Addressing the rare word problem") and Jean et al. 2015: the source
    word is translated with `dictionary` when it has an entry, and copied as is otherwise
    (right for names and numbers). `weights`: `(tgt_len, src_len)`, one row per output token
    and one column per source token (no </s> column: the end of sentence is nothing to copy).

    Made for word-level tokens, and token for token right for the others too: an unknown
    character is replaced by the source character it looked at, an unknown SentencePiece piece
    by a source piece. A piece's word-start mark "▁" stays out of the dictionary look-up and
    on the replacement ("▁Zoltan" -> "▁" + dictionary["Zoltan"]).
    """
    matrix = weight_matrix(weights, tgt_len=len(tgt_tokens), src_len=len(src_tokens))
    out = list(tgt_tokens)
    for j, token in enumerate(tgt_tokens):
        if token == unk:
            out[j] = _lookup(src_tokens[int(matrix[j].argmax())], dictionary)
    return out


def _lookup(source: str, dictionary: dict[str, str] | None) -> str:
    """`source` translated by `dictionary` (keeping a leading "▁" word-start mark), else itself."""
    if not dictionary:
        return source
    mark = SPACE if source.startswith(SPACE) and len(source) > 1 else ""
    word = source[len(mark):]
    return mark + dictionary[word] if word in dictionary else source


def load_dictionary(path: str | Path) -> dict[str, str]:
    """A `src<TAB>tgt` word dictionary, one pair a line; blank lines are skipped.

    When a source word has several lines the first wins, so a lexicon sorted by probability
    keeps its best translation.
    """
    table: dict[str, str] = {}
    for n, line in enumerate(read_text_lines(path), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
            raise DataError(
                f"expected 'source<TAB>target', got {line!r} ({len(fields)} tab-separated fields)",
                path=path,
                line=n,
            )
        table.setdefault(fields[0].strip(), fields[1].strip())
    return table
