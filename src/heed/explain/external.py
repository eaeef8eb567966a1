"""A statistical aligner beside the model: eflomal (Östling and Tiedemann 2016, an IBM1 + HMM +
fertility model sampled with Gibbs; on PyPI, the `heed-nmt[align]` extra).

It aligns a corpus in both directions and the two are joined (heed.explain.align_methods.symmetrize,
grow-diag-final-and by default): the links guided alignment training learns from
(`train.alignment.supervision: FILE`), and a silver reference for the model's own readings on text
without a gold (`heed align --reference`). Words are the whitespace words of the text as heed reads
it (heed.data.corpus.normalize), the words every Pharaoh file in heed counts; eflomal lowercases
them for its counts.
"""
from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from heed.data.corpus import Pair
from heed.data.pharaoh import Link, read_alignments
from heed.errors import HeedError
from heed.explain.align_methods import Symmetrize, symmetrize

INSTALL = "pip install 'heed-nmt[align]'"


def eflomal_links(pairs: Sequence[Pair], *, how: Symmetrize = "grow-diag-final") -> list[set[Link]]:
    """Every pair's word links (source word i, target word j), eflomal's two directions joined by
    `how`. HeedError when eflomal is not installed."""
    try:
        import eflomal
    except ImportError:
        raise HeedError(f"aligning with eflomal needs the eflomal package: {INSTALL}") from None
    with tempfile.TemporaryDirectory(prefix="heed-eflomal-") as work:
        forward, backward = Path(work) / "forward.align", Path(work) / "backward.align"
        eflomal.Aligner().align([p.src + "\n" for p in pairs], [p.tgt + "\n" for p in pairs],
                                links_filename_fwd=str(forward), links_filename_rev=str(backward), quiet=True)
        # both files are source-first, one line per pair (an empty line for a pair eflomal left unlinked)
        ahead, behind = _lines(forward, len(pairs)), _lines(backward, len(pairs))
    return [symmetrize(f, b, how) for f, b in zip(ahead, behind)]


def _lines(path: Path, pairs: int) -> list[set[Link]]:
    links = read_alignments(path)
    links += [set() for _ in range(pairs - len(links))]  # eflomal may leave trailing empty lines out
    if len(links) != pairs:
        raise HeedError(f"eflomal wrote {len(links)} lines for {pairs} sentence pairs")
    return links
