"""Every head of every decoder layer's attention over the source, as it is (`heads`) or weighed by
what each source position adds through its head (`value_norms`; Kobayashi et al. 2020, "Attention
is not only a weight"), while the model reads given translations (teacher forcing): two readings
of heed.explain.readings, over the model alone (model, codec, device)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from heed.data.codec import Codec
from heed.explain.pairs import forced_pairs, precision
from heed.results import ReadingResult

BATCH = 64  # pairs a pass reads at once


def heads(model: Any, codec: Codec, device: torch.device, src_texts: Sequence[str],
          tgt_texts: Sequence[str | Sequence[str]], options: Any, *, max_src_len: int | None = None,
          value_norms: bool = False) -> list[ReadingResult]:
    """Per pair, (layers, heads, len(tgt_tokens) + 1, len(src_tokens) + 1): model.attention_heads
    (a heed.nn.protocol.HeadsModel), each weight times the norm of its source position's value
    through its head with `value_norms` (a ValueNormModel)."""
    pairs = forced_pairs(codec, src_texts, tgt_texts, max_src_len=max_src_len, empty="there is no attention to show")
    name = "value_norms" if value_norms else "heads"
    out: list[ReadingResult] = []
    with torch.inference_mode(), precision(model, device):
        for group, batch in pairs.batches(model, device, BATCH):
            stack = model.attention_heads(batch.src, batch.src_lengths, batch.tgt_in)  # (L, H, B, T+1, S+1)
            if value_norms:
                stack = stack * model.value_norms(batch.src, batch.src_lengths)[:, :, :, None, :]
            stack = stack.float().cpu().numpy()
            for row, k in enumerate(group):
                s, t = pairs.sizes(k)
                out.append(ReadingResult(name, pairs.src_tokens[k], pairs.tgt_tokens[k],
                                         ("layer", "head", "target", "source"), stack[:, :, row, :t, :s]))
    return out


def value_norms(model: Any, codec: Codec, device: torch.device, src_texts: Sequence[str],
                tgt_texts: Sequence[str | Sequence[str]], options: Any, *,
                max_src_len: int | None = None) -> list[ReadingResult]:
    """heads(), each weight weighed by its source position's value norm."""
    return heads(model, codec, device, src_texts, tgt_texts, options, max_src_len=max_src_len, value_norms=True)


__all__ = ["heads", "value_norms"]
