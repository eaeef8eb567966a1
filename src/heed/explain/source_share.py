"""Each prediction's source share against its target-prefix share at the last decoder layer
(heed.explain.contributions: ALTI+, or rollout), while the model reads given translations: the
reading `source_share` of heed.explain.readings, over the model alone (model, codec, device). A low
share marks a token produced mostly from the output so far rather than from the source (Xu et al.
2023 flag hallucinations so). `heed translate --explain source-share` and /v1/translate's explain
read it for every hypothesis of an n-best list (`nbest_source_shares`)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from heed.data.codec import Codec
from heed.explain.contributions import Reading, SourceShare, contributions
from heed.explain.pairs import forced_pairs, precision
from heed.results import Labelled, ReadingResult

if TYPE_CHECKING:
    from heed.results import Translation

BATCH = 64  # pairs a pass reads at once


def source_share(model: Any, codec: Codec, device: torch.device, src_texts: Sequence[str],
                 tgt_texts: Sequence[str | Sequence[str]], options: Any, *,
                 max_src_len: int | None = None) -> list[ReadingResult]:
    """Per pair, each source token's share of each prediction at the last decoder layer (target,
    source), by `options.method` (ALTI+ or rollout); extras per_token (target,): each prediction's
    source share (the row's sum), and prefix (target, prefix): each decoder input's share. A
    heed.nn.protocol.ContributionModel."""
    pairs = forced_pairs(codec, src_texts, tgt_texts, max_src_len=max_src_len, empty="there is no source to share")
    out: list[ReadingResult] = []
    with torch.inference_mode(), precision(model, device):
        for group, batch in pairs.batches(model, device, BATCH):
            shares = contributions(model, batch.src, batch.src_lengths, batch.tgt_in, reading=options.method)
            source, prefix = shares.source[-1].cpu().numpy(), shares.target[-1].cpu().numpy()
            for row, k in enumerate(group):
                s, t = pairs.sizes(k)
                out.append(ReadingResult("source_share", pairs.src_tokens[k], list(pairs.tgt_tokens[k]),
                                         ("target", "source"), source[row, :t, :s],
                                         {"per_token": Labelled(("target",), source[row, :t, :s].sum(-1)),
                                          "prefix": Labelled(("target", "prefix"), prefix[row, :t, :t])}))
    return out


def as_source_share(result: ReadingResult, method: Reading) -> SourceShare:
    """The reading `source_share`'s result as a SourceShare (Translator.source_share's)."""
    return SourceShare(result.src_tokens, result.tgt_tokens, result.extra("per_token"), result.values,
                       result.extra("prefix"), method)


def nbest_source_shares(model: Any, codec: Codec, device: torch.device, sources: Sequence[str],
                        nbests: Sequence[Sequence[Translation]], *,
                        max_src_len: int | None = None) -> list[list[SourceShare | None]]:
    """Each n-best list's hypotheses' ALTI+ source shares (one teacher-forced pass over every
    hypothesis), per source; None for every hypothesis of a blank source (nothing to share)."""
    from heed.explain.readings import SourceShareOptions

    pairs = [(k, n) for k, nbest in enumerate(nbests) for n in range(len(nbest)) if sources[k].strip()]
    shares = source_share(model, codec, device, [sources[k] for k, _ in pairs],
                          [nbests[k][n].tokens for k, n in pairs], SourceShareOptions(), max_src_len=max_src_len)
    out: list[list[SourceShare | None]] = [[None] * len(nbest) for nbest in nbests]
    for (k, n), share in zip(pairs, shares):
        out[k][n] = as_source_share(share, "alti")
    return out


__all__ = ["as_source_share", "nbest_source_shares", "source_share"]
