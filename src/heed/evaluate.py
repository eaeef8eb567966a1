"""Corpus-level scores of detokenized translations: sacrebleu BLEU and chrF, and exact match,
for a whole test set or per source-length bucket (`by_length`); and how often outputs repeat
themselves (`repeated_token_rate`).

Scores are computed on plain text (what a user reads), never on token ids, so they compare across
tokenizers. BLEU uses sacrebleu's default 13a tokenization; the signature printed beside a score says
exactly how it was computed (Post 2018, "A Call for Clarity in Reporting BLEU Scores").
"""
from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

from sacrebleu.metrics import BLEU, CHRF

from heed.errors import HeedError


@dataclass(frozen=True)
class Scores:
    """bleu, chrf and exact_match are percentages (0-100)."""

    bleu: float
    chrf: float
    exact_match: float
    exact: int  # sentences whose hypothesis equals the reference, character for character
    total: int
    bleu_signature: str
    chrf_signature: str

    def as_dict(self) -> dict[str, float | int | str]:
        return {
            "bleu": self.bleu,
            "chrf": self.chrf,
            "exact_match": self.exact_match,
            "exact": self.exact,
            "total": self.total,
            "bleu_signature": self.bleu_signature,
            "chrf_signature": self.chrf_signature,
        }


def exact_matches(hyps: Sequence[str], refs: Sequence[str]) -> int:
    """How many hypotheses equal their reference, ignoring only leading/trailing whitespace."""
    return sum(h.strip() == r.strip() for h, r in zip(hyps, refs))


def evaluate(hyps: Sequence[str], refs: Sequence[str]) -> Scores:
    """Corpus BLEU, chrF and exact match of `hyps` against one reference each."""
    if len(hyps) != len(refs):
        raise HeedError(f"{len(hyps)} translations but {len(refs)} references; give one reference per line")
    if not refs:
        raise HeedError("nothing to evaluate: no references")
    hyps, refs = list(hyps), list(refs)
    bleu, chrf = BLEU(), CHRF()
    bleu_score = bleu.corpus_score(hyps, [refs])
    chrf_score = chrf.corpus_score(hyps, [refs])
    exact = exact_matches(hyps, refs)
    return Scores(
        bleu=float(bleu_score.score),
        chrf=float(chrf_score.score),
        exact_match=100.0 * exact / len(refs),
        exact=exact,
        total=len(refs),
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
    )


def format_scores(scores: Scores) -> str:
    """Three lines for a terminal or a log: BLEU and chrF with their signatures, then exact match."""
    return (
        f"BLEU = {scores.bleu:.2f}   ({scores.bleu_signature})\n"
        f"chrF = {scores.chrf:.2f}   ({scores.chrf_signature})\n"
        f"exact match = {scores.exact_match:.2f}% ({scores.exact}/{scores.total})"
    )


# ---------------------------------------------------------------------------- repetition


def repeated_token_rate(outputs: Sequence[Sequence[Hashable]], n: int = 1) -> float:
    """The fraction of output tokens that repeat the n-gram right before them: the loop a decoder
    falls into when its attention keeps returning to the same source words (what coverage, Tu et
    al. 2016 and See et al. 2017, is meant to cure).

    Token i of an output y (0-based) is a repeat when i >= 2n - 1 and the n-gram ending at it equals
    the n-gram just before that one: y[i-n+1 .. i] == y[i-2n+1 .. i-n]. With n = 1, a token equal to
    the token before it ("the the"); with n = 2, "a b a b" repeats at its last two tokens. The rate
    is (repeats summed over all outputs) / (tokens summed over all outputs), in [0, 1]; 0.0 when
    there are no tokens at all. An output is any sequence of tokens: ids, or words (`text.split()`);
    a plain string counts its characters.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    repeats = tokens = 0
    for output in outputs:
        y = list(output)
        tokens += len(y)
        repeats += sum(y[i - n + 1:i + 1] == y[i - 2 * n + 1:i - n + 1] for i in range(2 * n - 1, len(y)))
    return repeats / tokens if tokens else 0.0


# ---------------------------------------------------------------------------- scores by length

LengthUnit = Literal["words", "chars", "tokens"]


@dataclass(frozen=True)
class Bucket:
    """Source lengths `low` to `high`, both included; `high` None = no upper limit."""

    low: int
    high: int | None

    @property
    def label(self) -> str:
        """"1-10", "7" (one length), or "31+" without an upper limit: the forms `parse_buckets` reads."""
        if self.high is None:
            return f"{self.low}+"
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"

    def __contains__(self, length: int) -> bool:
        return self.low <= length and (self.high is None or length <= self.high)


@dataclass(frozen=True)
class BucketScore:
    """Scores of the sentences whose source length falls in one bucket; percentages (0-100)."""

    label: str
    count: int  # sentences in the bucket
    bleu: float
    chrf: float
    exact_match: float
    exact: int  # of them, hypotheses equal to their reference


def source_lengths(srcs: Sequence[str], unit: Literal["words", "chars"] = "words") -> list[int]:
    """Length of each source: whitespace-separated words, or characters (spaces included).
    ("tokens", the model's own tokens, needs the model: count `Translation.src_tokens`.)"""
    if unit == "words":
        return [len(s.split()) for s in srcs]
    if unit == "chars":
        return [len(" ".join(s.split())) for s in srcs]
    raise ValueError(f"unknown length unit {unit!r}; use 'words' or 'chars' (or pass lengths=)")


def parse_buckets(spec: str) -> list[Bucket]:
    """"1-10,11-20,21+" -> buckets. Ranges include both ends, come in increasing order and do
    not overlap; "7" is the one length 7, "A+" (last only) has no upper limit. Raises HeedError
    saying what is wrong."""
    buckets: list[Bucket] = []
    for part in (p.strip() for p in spec.split(",")):
        m = re.fullmatch(r"(\d+)\s*(?:-\s*(\d+)|(\+))?", part)
        if m is None:
            raise HeedError(f"--buckets: cannot read {part!r}; write ranges like 1-10,11-20,21+ (both ends included)")
        low = int(m.group(1))
        high = None if m.group(3) else int(m.group(2)) if m.group(2) else low
        if high is not None and high < low:
            raise HeedError(f"--buckets: range {part!r} ends before it starts")
        if buckets:
            last = buckets[-1]
            if last.high is None:
                raise HeedError(f"--buckets: {last.label} has no upper limit, so it must come last")
            if low <= last.high:
                raise HeedError(f"--buckets: {last.label} and {part} overlap at {low}: ranges include both ends "
                                f"(write e.g. 1-10,11-20), in increasing order")
        buckets.append(Bucket(low, high))
    return buckets


# The default buckets are fixed per unit, never fitted to a test set, so two test sets (or two
# runs) are always scored over the same ranges and their tables line up. Buckets no sentence falls
# in are left out of a table. Tokens: subwords run ~1.3x words, characters ~5x.
DEFAULT_BUCKET_EDGES: dict[str, tuple[int, ...]] = {
    "words": (5, 10, 15, 20, 30, 40, 50),
    "tokens": (10, 20, 30, 40, 60, 80, 100),
    "chars": (25, 50, 75, 100, 150, 200, 250),
}


def default_buckets(unit: LengthUnit = "words") -> list[Bucket]:
    """The fixed default buckets of `unit`: words 0-5, 6-10, 11-15, 16-20, 21-30, 31-40, 41-50,
    51+; tokens 0-10, 11-20, 21-30, 31-40, 41-60, 61-80, 81-100, 101+; characters 0-25, 26-50,
    51-75, 76-100, 101-150, 151-200, 201-250, 251+. An empty source (length 0) is in the first."""
    if unit not in DEFAULT_BUCKET_EDGES:
        raise ValueError(f"unknown length unit {unit!r}; use one of {', '.join(DEFAULT_BUCKET_EDGES)}")
    edges = DEFAULT_BUCKET_EDGES[unit]
    lows = (0, *(e + 1 for e in edges))
    return [Bucket(low, high) for low, high in zip(lows, (*edges, None))]


def by_length(
    srcs: Sequence[str],
    hyps: Sequence[str],
    refs: Sequence[str],
    buckets: Sequence[Bucket] | None = None,
    *,
    unit: Literal["words", "chars"] = "words",
    lengths: Sequence[int] | None = None,
) -> list[BucketScore]:
    """BLEU, chrF and exact match of the sentences in each source-length bucket.

    Length is that of the source `srcs[k]` in `unit`s (whitespace words by default), or
    `lengths[k]` when given (e.g. the model's token counts). `buckets` default to
    `default_buckets(unit)` (the words buckets when `lengths` are given). A bucket's BLEU is a corpus BLEU over its sentences only.
    Buckets no sentence falls in are left out, and so are sentences outside every bucket.
    """
    if not len(srcs) == len(hyps) == len(refs):
        raise HeedError(f"{len(srcs)} sources, {len(hyps)} translations and {len(refs)} references; "
                        "give one of each per line")
    lengths = list(lengths) if lengths is not None else source_lengths(srcs, unit)
    if len(lengths) != len(srcs):
        raise ValueError(f"{len(lengths)} lengths for {len(srcs)} sentences")
    if buckets is None:
        buckets = default_buckets(unit)
    out = []
    for bucket in buckets:
        members = [k for k, n in enumerate(lengths) if n in bucket]
        if not members:
            continue
        scores = evaluate([hyps[k] for k in members], [refs[k] for k in members])
        out.append(BucketScore(bucket.label, len(members), scores.bleu, scores.chrf, scores.exact_match, scores.exact))
    return out
