"""A candidate `both` rule measured and not kept in heed: "guide", eflomal run on the new pairs with
the training corpus's priors plus the model's reading of those same pairs as extra lexical prior
counts (LEX lines), so that eflomal's sampler (its jumps, fertilities and its own counts) weighs the
translator's evidence instead of a join after the fact (heed.explain.priors.join_links).

Measured by bench/studies/align_priors.py (the dates gold) and bench/studies/cross_domain_alignment.py
(the cross-domain silver); bench/RESULTS.md, "Text unlike the training data": worse than the priors
alone and than fill at null 0.9 across corpora at every weight, and than the product on the dates
gold, so heed's `--combine` does not offer it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from heed.data.corpus import Pair
from heed.data.pharaoh import Link
from heed.data.units import Units
from heed.explain.priors import Priors, Reading, priors_links

MIN_SHARE = 0.01  # a row's cells under this share of its weight add no count


def evidence_lines(readings: Sequence[Reading], *, units: Units, weight: float) -> list[str]:
    """The model's reading of the pairs as eflomal lexical priors (LEX lines): each target unit of
    each pair adds `weight` counts, shared among the source words by its attention row (cells under
    MIN_SHARE of the row dropped, the rest normalised), summed over the pairs per (source word,
    target unit), lowercased as eflomal reads them. Weight 1: a unit counts as much as one link
    eflomal made in the training corpus (what the corpus priors count)."""
    counts: dict[tuple[str, str], float] = {}
    for reading in readings:
        src = [w.lower() for w in reading.src_words]
        tgt = [u.lower() for u in (reading.tgt_words if units == "words" else list("".join(reading.tgt_words)))]
        attention = np.asarray(reading.attention, dtype=np.float64).reshape(len(tgt), len(src))  # (tgt units, src words)
        for j, row in enumerate(attention):
            if row.sum() <= 0:
                continue
            kept = np.flatnonzero(row >= MIN_SHARE * row.sum())
            for i in kept:
                key = (src[i], tgt[j])
                counts[key] = counts.get(key, 0.0) + weight * float(row[i] / row[kept].sum())
    return [f"LEX\t{s}\t{t}\t{alpha:.6g}" for (s, t), alpha in sorted(counts.items())]


def guide_links(pairs: Sequence[Pair], readings: Sequence[Reading], priors: Priors, *,
                weight: float = 1.0) -> list[set[Link]]:
    """eflomal on `pairs` with `priors` and the model's reading of those pairs (`readings`, one a
    pair) added to them as lexical counts (evidence_lines with `weight`), its two directions joined
    by grow-diag-final (heed.explain.priors.priors_links). Weight 0: the priors alone."""
    assert len(pairs) == len(readings)
    extra = evidence_lines(readings, units=priors.units, weight=weight) if weight > 0 else []
    return priors_links(pairs, replace(priors, lines=priors.lines + tuple(extra)))
