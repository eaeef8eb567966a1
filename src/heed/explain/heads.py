"""Every head of every decoder layer's attention over the source weighed by what each source
position adds through its head (Kobayashi et al. 2020, "Attention is not only a weight"), while the
model reads given translations (teacher forcing): the reading `value_norms` of
heed.explain.readings, over the model alone (model, codec, device). The heads as they are, the
reading `heads`, are heed.explain.given_pairs.attention_layers'."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from heed.data.codec import Codec
from heed.explain.pairs import forced_pairs, precision
from heed.results import ReadingResult

BATCH = 64  # pairs a pass reads at once


def value_norms(model: Any, codec: Codec, device: torch.device, src_texts: Sequence[str],
                tgt_texts: Sequence[str | Sequence[str]], options: Any, *,
                max_src_len: int | None = None) -> list[ReadingResult]:
    """Per pair, (layers, heads, len(tgt_tokens) + 1, len(src_tokens) + 1): every head's attention
    (model.attention_heads, a heed.nn.protocol.HeadsModel), each weight times the norm of its
    source position's value through its head (model.value_norms, a ValueNormModel), as heed
    align's value-norm reading weighs them (heed.explain.forced.forced_attention)."""
    pairs = forced_pairs(codec, src_texts, tgt_texts, max_src_len=max_src_len, empty="there is no attention to show")
    out: list[ReadingResult] = []
    with torch.inference_mode(), precision(model, device):
        for group, batch in pairs.batches(model, device, BATCH):
            stack = model.attention_heads(batch.src, batch.src_lengths, batch.tgt_in)  # (L, H, B, T+1, S+1)
            stack = stack * model.value_norms(batch.src, batch.src_lengths)[:, :, :, None, :]
            stack = stack.float().cpu().numpy()
            for row, k in enumerate(group):
                s, t = pairs.sizes(k)
                out.append(ReadingResult("value_norms", pairs.src_tokens[k], pairs.tgt_tokens[k],
                                         ("layer", "head", "target", "source"), stack[:, :, row, :t, :s]))
    return out


__all__ = ["value_norms"]
