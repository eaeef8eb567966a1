"""The logit lens (nostalgebraist 2020): what each decoder layer would predict were it the last.

Each decoder layer's output stream at every target row is read through what reads the last one
(heed.nn.protocol.ContributionModel.read_out: a pre-norm stack's final LayerNorm, then the output
layer). At the last layer this is the model's own distribution; at earlier layers it shows when
the prediction forms. A post-norm stack normalises every layer's output already, so the lens reads
it as it is.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from heed.nn.protocol import ContributionModel


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


__all__ = ["LogitLens", "lens"]

