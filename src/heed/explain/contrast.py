"""Why the model gives one output and not another: each source token's attribution to the
difference of the two outputs' log-probabilities (heed.explain.attribution.Contrast; Captum), the
reading `contrast` of heed.explain.readings, over the model alone (model, codec, device). Its
options hold the other output of every pair (`contrasts`, one per source)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from heed.data.codec import Codec
from heed.errors import HeedError
from heed.explain.attribution import Contrast, check_float32, contrast_ids
from heed.explain.pairs import forced_pairs, known_target_ids
from heed.results import Labelled, ReadingResult


def contrast(model: Any, codec: Codec, device: torch.device, src_texts: Sequence[str],
             tgt_texts: Sequence[str | Sequence[str]], options: Any, *,
             max_src_len: int | None = None) -> list[ReadingResult]:
    """Per pair, each source token's attribution (source,) to log p(tgt_texts[k]) - log
    p(options.contrasts[k]) (a text, or its tokens, spelt in the model's target vocabulary), by
    `options.method` at `options.steps` points; extras log_prob_output and log_prob_contrast (): the
    two outputs' log-probabilities, delta (): integrated gradients' completeness gap where there is
    one, and contrast_tokens (contrast,): the other output's tokens. An AttributableModel in float32."""
    check_float32(model)
    contrasts = options.contrasts
    pairs = forced_pairs(codec, src_texts, tgt_texts, max_src_len=max_src_len, empty="there is nothing to attribute to")
    contrast_tokens = [codec.tgt_tokens(c) if isinstance(c, str) else list(c) for c in contrasts]
    for k, text in enumerate(contrasts):
        if isinstance(text, str) and not text.strip():
            raise HeedError(f"contrasts[{k}] is empty: give the other output to contrast with")
    other_ids = [known_target_ids(codec, t, s, f"contrasts[{k}]")
                 for k, (s, t) in enumerate(zip(pairs.src_tokens, contrast_tokens))]
    out = []
    for k, (src_ids, output_ids) in enumerate(pairs.examples):
        source, lp_out, lp_contrast, delta = contrast_ids(model, src_ids, output_ids, other_ids[k],
                                                          method=options.method, steps=options.steps, device=device)
        extras = {"log_prob_output": Labelled((), np.float64(lp_out)),
                  "log_prob_contrast": Labelled((), np.float64(lp_contrast)),
                  "contrast_tokens": Labelled(("contrast",), np.array(contrast_tokens[k], dtype=object))}
        if delta is not None:
            extras["delta"] = Labelled((), np.float64(delta))
        out.append(ReadingResult("contrast", pairs.src_tokens[k], list(pairs.tgt_tokens[k]), ("source",), source,
                                 extras))
    return out


def as_contrast(result: ReadingResult, method: Any, steps: int) -> Contrast:
    """The reading `contrast`'s result as a Contrast (Translator.contrast's, heed attribute --contrast's)."""
    extras = result.extras
    return Contrast(result.src_tokens, result.tgt_tokens, result.extra("contrast_tokens").tolist(), method,
                    steps if method == "integrated_gradients" else None, result.values,
                    float(result.extra("log_prob_output")), float(result.extra("log_prob_contrast")),
                    float(extras["delta"].values) if "delta" in extras else None)


__all__ = ["as_contrast", "contrast"]
