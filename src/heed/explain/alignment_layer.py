"""The alignment layer's weights as a reading (`heed explain alignment_layer`, POST
/v1/explain/alignment_layer, Translator.explain("alignment_layer")): a model trained with
model.alignment_layer (heed.nn.transformer.alignment_layer: Garg et al. 2019's full-context
alignment, an attention over the source that reads the whole target) gives every head of that
layer while it reads the given translations; `heed align` links words by their mean by default.
A model without the layer is refused by the registry (heed.nn.protocol.AlignmentLayerModel)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from heed.data.codec import Codec
from heed.explain.pairs import forced_pairs, precision
from heed.results import ReadingResult


def run(model: Any, codec: Codec, device: torch.device, src_texts: Sequence[str],
        tgt_texts: Sequence[str | Sequence[str]], options: Any, *, max_src_len: int | None = None,
        batch_size: int = 64) -> list[ReadingResult]:
    """One ReadingResult per pair: the alignment layer's (head, target, source) weights, target
    row t for target token t (the last row </s>), source column s for source token s (the last </s>)."""
    pairs = forced_pairs(codec, src_texts, tgt_texts, max_src_len=max_src_len, empty="there is nothing to align")
    out: list[ReadingResult] = []
    with torch.inference_mode(), precision(model, device):
        for group, batch in pairs.batches(model, device, batch_size):
            heads = model.alignment_heads(batch.src, batch.src_lengths, batch.tgt_in)[0].float().cpu().numpy()
            for row, k in enumerate(group):  # heads (heads, batch, tgt_len, src_len)
                s, t = pairs.sizes(k)
                out.append(ReadingResult("alignment_layer", pairs.src_tokens[k], pairs.tgt_tokens[k],
                                         ("head", "target", "source"), heads[:, row, :t, :s]))
    return out
