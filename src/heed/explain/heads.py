"""Every head of every decoder layer's attention over the source while the model reads given
translations (teacher forcing), over the model alone (model, codec, device): the readings `heads`
(the weights as they are, and on request a Transformer's self-attention maps) and `value_norms`
(each weight times what its source position adds through its head: Kobayashi et al. 2020,
"Attention is not only a weight") of heed.explain.readings."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from heed.data.codec import Codec
from heed.explain.pairs import forced_pairs, precision
from heed.nn.protocol import SelfAttentionModel
from heed.results import Labelled, ReadingResult

BATCH = 64  # pairs a pass reads at once
CROSS = ("layer", "head", "target", "source")


def heads(model: Any, codec: Codec, device: torch.device, src_texts: Sequence[str],
          tgt_texts: Sequence[str | Sequence[str]], options: Any, *,
          max_src_len: int | None = None) -> list[ReadingResult]:
    """Per pair, (layers, heads, len(tgt_tokens) + 1, len(src_tokens) + 1): every head's attention
    over the source (model.attention_heads, a heed.nn.protocol.HeadsModel; an RNN's one attention is
    (1, 1, ...)). With `options.self_attention` naming "encoder" and/or "decoder", a Transformer's
    (a SelfAttentionModel's) self-attention maps too, as the extras "encoder" (layer, head, source,
    key) and "decoder" (layer, head, target, prefix; causal); a model without them gives neither."""
    asked = set(options.self_attention)
    pairs = forced_pairs(codec, src_texts, tgt_texts, max_src_len=max_src_len, empty="there is no attention to show")
    selfs = bool(asked) and isinstance(model, SelfAttentionModel)
    out: list[ReadingResult] = []
    with torch.inference_mode(), precision(model, device):
        for group, batch in pairs.batches(model, device, BATCH):
            if selfs:
                maps = model.attention_maps(batch.src, batch.src_lengths, batch.tgt_in)
                cross, encoder, decoder = (
                    m.transpose(1, 2).float().cpu().numpy() for m in (maps.cross, maps.encoder, maps.decoder)
                )  # (L, H, B, ., .)
            else:
                cross = model.attention_heads(batch.src, batch.src_lengths, batch.tgt_in).float().cpu().numpy()
                encoder = decoder = None
            for row, k in enumerate(group):
                s, t = pairs.sizes(k)
                extras = {}
                if encoder is not None and "encoder" in asked:
                    extras["encoder"] = Labelled(("layer", "head", "source", "key"), encoder[:, :, row, :s, :s])
                if decoder is not None and "decoder" in asked:
                    extras["decoder"] = Labelled(("layer", "head", "target", "prefix"), decoder[:, :, row, :t, :t])
                out.append(ReadingResult("heads", pairs.src_tokens[k], pairs.tgt_tokens[k], CROSS,
                                         cross[:, :, row, :t, :s], extras))
    return out


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
                out.append(ReadingResult("value_norms", pairs.src_tokens[k], pairs.tgt_tokens[k], CROSS,
                                         stack[:, :, row, :t, :s]))
    return out


__all__ = ["heads", "value_norms"]
