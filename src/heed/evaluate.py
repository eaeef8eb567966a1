"""Corpus-level scores of detokenized translations: sacrebleu BLEU and chrF, and exact match.

Scores are computed on plain text (what a user reads), never on token ids, so they compare across
tokenizers. BLEU uses sacrebleu's default 13a tokenization; the signature printed beside a score says
exactly how it was computed (Post 2018, "A Call for Clarity in Reporting BLEU Scores").
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
