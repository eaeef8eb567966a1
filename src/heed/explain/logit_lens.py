"""The logit lens (nostalgebraist 2020): what each decoder layer would predict were it the last.

Each decoder layer's output stream at every target row is read through what reads the last one
(heed.nn.protocol.ContributionModel.read_out: a pre-norm stack's final LayerNorm, then the output
layer). At the last layer this is the model's own distribution; at earlier layers it shows when
the prediction forms. A post-norm stack normalises every layer's output already, so the lens reads
it as it is.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from heed.data.codec import Codec
from heed.explain.pairs import forced_pairs, precision
from heed.nn.protocol import ContributionModel
from heed.results import Labelled, ReadingResult

BATCH = 8  # sentences a pass reads at once: each layer's logits are (batch, tgt_len, vocab)


@dataclass(frozen=True)
class LogitLens:
    """One sentence pair through the lens.

    src_tokens:   the source tokens (without </s>)
    tgt_tokens:   the output tokens (without </s>); rows are these, then </s>
    top_tokens:   [layer][row] the `top` likeliest tokens at that layer, likeliest first
    top_probs:    (layers, len(tgt_tokens) + 1, top) their probabilities
    target_probs: (layers, len(tgt_tokens) + 1) the probability each layer gives the real output token
    target_ranks: (layers, len(tgt_tokens) + 1) that token's rank there (0 = the layer's top choice)
    """

    src_tokens: list[str]
    tgt_tokens: list[str]
    top_tokens: list[list[list[str]]]
    top_probs: np.ndarray
    target_probs: np.ndarray
    target_ranks: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        return {"src_tokens": self.src_tokens, "tgt_tokens": self.tgt_tokens, "top_tokens": self.top_tokens,
                "top_probs": self.top_probs.tolist(), "target_probs": self.target_probs.tolist(),
                "target_ranks": self.target_ranks.tolist()}


def lens(model: ContributionModel, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, tgt_out: Tensor, *,
         top: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Teacher-forced: (top ids (layers, batch, tgt_len, top), their probabilities, the real token's
    probability (layers, batch, tgt_len), its rank), one layer's logits at a time."""
    states = model.decoder_states(src, src_lengths, tgt_in)  # (layers, batch, tgt_len, dim)
    ids, probs, gold_probs, ranks = [], [], [], []
    for layer_states in states:
        log_probs = torch.log_softmax(model.read_out(layer_states).float(), dim=-1)  # (batch, tgt_len, vocab)
        best = log_probs.topk(top, dim=-1)
        gold = log_probs.gather(-1, tgt_out.unsqueeze(-1))  # (batch, tgt_len, 1)
        ids.append(best.indices)
        probs.append(best.values.exp())
        gold_probs.append(gold.squeeze(-1).exp())
        ranks.append((log_probs > gold).sum(-1))
    return torch.stack(ids), torch.stack(probs), torch.stack(gold_probs), torch.stack(ranks)


def logit_lens(model: Any, codec: Codec, device: torch.device, src_texts: Sequence[str],
               tgt_texts: Sequence[str | Sequence[str]], options: Any, *,
               max_src_len: int | None = None) -> list[ReadingResult]:
    """The reading `logit_lens` of heed.explain.readings: per pair, the probability each decoder
    layer gives the real output token (layer, target); extras top_tokens and top_probs (layer,
    target, top): the layer's `options.top` likeliest tokens, and target_ranks (layer, target): the
    real token's rank there (0 = the layer's top choice). A heed.nn.protocol.ContributionModel."""
    pairs = forced_pairs(codec, src_texts, tgt_texts, max_src_len=max_src_len, empty="there is nothing to read")
    vocab = codec.tgt_vocab
    out: list[ReadingResult] = []
    with torch.inference_mode(), precision(model, device):
        for group, batch in pairs.batches(model, device, BATCH):
            ids, probs, gold, ranks = (x.cpu().numpy() for x in lens(
                model, batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out, top=min(options.top, len(vocab))))
            for row, k in enumerate(group):
                _, t = pairs.sizes(k)
                words = [[[vocab.lookup(int(i)) for i in ids[layer, row, j]] for j in range(t)]
                         for layer in range(len(ids))]
                out.append(ReadingResult("logit_lens", pairs.src_tokens[k], list(pairs.tgt_tokens[k]),
                                         ("layer", "target"), gold[:, row, :t],
                                         {"top_tokens": Labelled(("layer", "target", "top"),
                                                                 np.array(words, dtype=object)),
                                          "top_probs": Labelled(("layer", "target", "top"), probs[:, row, :t]),
                                          "target_ranks": Labelled(("layer", "target"), ranks[:, row, :t])}))
    return out


def as_logit_lens(result: ReadingResult) -> LogitLens:
    """The reading `logit_lens`'s result as a LogitLens (Translator.logit_lens', heed lens')."""
    return LogitLens(result.src_tokens, result.tgt_tokens, result.extra("top_tokens").tolist(),
                     result.extra("top_probs"), result.values, result.extra("target_ranks"))


__all__ = ["LogitLens", "as_logit_lens", "lens", "logit_lens"]

