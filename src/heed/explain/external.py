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
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from heed.data.corpus import Pair
from heed.data.pharaoh import Link, read_alignments
from heed.errors import HeedError
from heed.explain.align_methods import Symmetrize, symmetrize

INSTALL = "pip install 'heed-nmt[align]'"
EFLOMAL_MAX_WORDS = 1023  # eflomal leaves a pair with a side of 1,024 words or more unaligned (an empty line)


def eflomal_links(pairs: Sequence[Pair], *, how: Symmetrize = "grow-diag-final",
                  warn: Callable[[str], None] | None = None) -> list[set[Link]]:
    """Every pair's word links (source word i, target word j), eflomal's two directions joined by
    `how`. HeedError when eflomal is not installed. `warn` (else warnings.warn) hears how many
    pairs eflomal leaves unaligned for their length (more than EFLOMAL_MAX_WORDS words a side)."""
    try:
        import eflomal  # noqa: F401  # here only to say how to install it when it is missing
    except ImportError:
        raise HeedError(f"aligning with eflomal needs the eflomal package: {INSTALL}") from None
    too_long = [n for n, p in enumerate(pairs, 1)
                if max(len(p.src.split()), len(p.tgt.split())) > EFLOMAL_MAX_WORDS]
    if too_long:
        lines = ", ".join(map(str, too_long[:5])) + (f" and {len(too_long) - 5:,} more" if len(too_long) > 5 else "")
        message = (f"{len(too_long):,} pair{'s' * (len(too_long) > 1)} (line{'s' * (len(too_long) > 1)} {lines}) "
                   f"{'have' if len(too_long) > 1 else 'has'} a side of more than {EFLOMAL_MAX_WORDS:,} words, which "
                   "eflomal leaves unaligned: their lines are empty (split long sentences)")
        (warn or (lambda m: warnings.warn(m, stacklevel=3)))(message)
    ahead, behind = eflomal_directions(pairs)
    return [symmetrize(f, b, how) for f, b in zip(ahead, behind)]


def eflomal_directions(pairs: Sequence[Pair], *, priors_input: Sequence[str] | None = None, samplers: int = 3,
                       rel_iterations: float = 1.0) -> tuple[list[set[Link]], list[set[Link]]]:
    """eflomal's forward and backward links of every pair, both source-first (heed.explain.priors
    keeps them as priors; `priors_input`: a priors file's eflomal lines, to align a few pairs with;
    `samplers`, `rel_iterations`: eflomal's Gibbs samplers and its share of the default iterations)."""
    import eflomal

    with tempfile.TemporaryDirectory(prefix="heed-eflomal-") as work:
        forward, backward = Path(work) / "forward.align", Path(work) / "backward.align"
        eflomal.Aligner(n_samplers=samplers, rel_iterations=rel_iterations).align(
            [p.src + "\n" for p in pairs], [p.tgt + "\n" for p in pairs],
            links_filename_fwd=str(forward), links_filename_rev=str(backward), quiet=True, priors_input=priors_input)
        # both files are source-first, one line per pair (an empty line for a pair eflomal left unlinked)
        return _lines(forward, len(pairs)), _lines(backward, len(pairs))


def _lines(path: Path, pairs: int) -> list[set[Link]]:
    links = read_alignments(path)
    links += [set() for _ in range(pairs - len(links))]  # eflomal may leave trailing empty lines out
    if len(links) != pairs:
        raise HeedError(f"eflomal wrote {len(links)} lines for {pairs} sentence pairs")
    return links
