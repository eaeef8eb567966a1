"""Copy attention: the pointer-generator of See et al. 2017 (§2.2), which mixes the decoder's
vocabulary distribution with its attention over the source, so that a source word the target
vocabulary lacks (a name never seen in training) can be copied instead of becoming <unk>.

    p_gen = sigmoid(w_h . h*_t + w_s . s_t + w_x . x_t + b_ptr)                    (eq. 8)
    P(w)  = p_gen P_vocab(w) + (1 - p_gen) sum_{i: w_i = w} a_i^t                  (eq. 9)

h*_t is the attention's context vector, s_t the decoder state, x_t the decoder input (the embedded
y_{t-1}), a^t the attention weights. P ranges over the *extended vocabulary*: the target vocabulary
(V ids) plus, per sentence, its source tokens the vocabulary lacks (ids V, V+1, ...;
heed.data.extended says how the source ids name them). Everything here runs in float32 (or
float64) whatever the model's dtype, and returns log P: a log of the mixture computed as a log-sum-exp of the two
parts' logs, so no probability is rounded to 0 before its log is taken.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

NEG_INF = float("-inf")
LOG_TINY = math.log(torch.finfo(torch.float32).tiny)  # about -87.3: the loss's floor for log P


class PointerGenerator(nn.Module):
    """The switch p_gen and the mixture (See et al. 2017, eqs. 8-9), for any attentional decoder.

    source_to_target: for each source vocabulary id, the target id of the same string or -1
    (heed.data.extended.source_to_target); target_size: V, the target vocabulary's size; unk_id:
    the target id of <unk>."""

    source_to_target: Tensor  # a buffer: (source vocabulary,) long

    def __init__(self, *, context_size: int, state_size: int, input_size: int,
                 source_to_target: Sequence[int], target_size: int, unk_id: int) -> None:
        super().__init__()
        self.unk_id = unk_id
        self.gate = nn.Linear(context_size + state_size + input_size, 1)  # [w_h; w_s; w_x] and b_ptr, eq. 8
        # Derived from the vocabularies (saved beside the weights), so not part of the state dict.
        self.register_buffer("source_to_target", torch.tensor(list(source_to_target), dtype=torch.long),
                             persistent=False)
        self.source_size = len(source_to_target)
        self.target_size = target_size

    def extended_ids(self, src: Tensor) -> tuple[Tensor, int]:
        """src (batch, src_len) the copy model's source ids -> (each position's extended target id,
        long (batch, src_len); the number of temporary ids the batch needs, max over sentences).

        A position whose token the target vocabulary lacks gets V + k, k numbering the sentence's
        distinct such tokens by first appearance (heed.data.extended.copyable_unknowns' order)."""
        src_size, tgt_size = self.source_size, self.target_size
        in_src = src < src_size
        from_table = self.source_to_target[src.clamp(max=src_size - 1)]  # (batch, src_len)
        known = torch.where(in_src, from_table, torch.where(src < src_size + tgt_size, src - src_size, -1))
        unknown = known < 0  # (batch, src_len)
        # same[b, i, j]: position j holds the same unknown token as position i
        same = (src.unsqueeze(2) == src.unsqueeze(1)) & unknown.unsqueeze(1)  # (batch, src_len, src_len)
        first = same.int().argmax(dim=2)  # (batch, src_len) first position of each token (for unknowns)
        positions = torch.arange(src.size(1), device=src.device)
        is_first = unknown & (first == positions)
        rank = is_first.long().cumsum(dim=1) - 1  # (batch, src_len) k of each first occurrence
        ids = torch.where(unknown, tgt_size + rank.gather(1, first), known)
        n_unknown = int(is_first.sum(dim=1).max()) if src.numel() else 0
        return ids, n_unknown

    def encodable(self, src: Tensor) -> Tensor:
        """The copy model's source ids -> ids the source embedding knows: every id past the source
        vocabulary (a token it lacks, heed.data.extended) is <unk>."""
        return src.masked_fill(src >= self.source_size, self.unk_id)

    def embeddable(self, tokens: Tensor) -> Tensor:
        """Extended target ids -> ids the target embedding knows: a copied token is read as <unk>
        when it is fed back (See et al. 2017 do the same)."""
        return tokens.masked_fill(tokens >= self.target_size, self.unk_id)

    def forward(self, logits: Tensor, gate_input: Tensor, weights: Tensor, copy_ids: Tensor,
                width: int) -> Tensor:
        """The log of the mixture over the extended vocabulary.

        logits (rows, [tgt_len,] V) the generator's; gate_input (rows, [tgt_len,] context + state +
        input) = [h*_t; s_t; x_t]; weights (rows, [tgt_len,] src_len) the attention; copy_ids
        (rows, src_len) long the extended target id of each source position; width >= V + the
        temporary ids in use. Returns float32 (float64 for a float64 model) (rows, [tgt_len,] width): log P(w), -inf for a
        temporary id no source token of the row has. A row with no source tokens at all (all
        padding, weights all 0) has nothing to copy: there p_gen is 1 and P = P_vocab. Weights that
        sum to less than 1 (local-p attention) are renormalised to a distribution over the source."""
        dtype = torch.promote_types(logits.dtype, torch.float32)  # float32, or float64 for a float64 model
        gate = self.gate(gate_input).to(dtype)  # (rows, [tgt_len,] 1)
        weights = weights.to(dtype)
        total = weights.sum(dim=-1, keepdim=True)  # (rows, [tgt_len,] 1): 1, or less under local-p's Gaussian
        has_source = total > 0
        # The copy distribution must sum to 1: local-p (Luong et al. 2015, eq. 10) scales the weights
        # by a Gaussian after the softmax, so they are renormalised; global attention's stay as they are.
        weights = weights / torch.where(has_source, total, 1.0)
        log_gen = torch.where(has_source, F.logsigmoid(gate), 0.0)  # log p_gen
        log_copy_gate = torch.where(has_source, F.logsigmoid(-gate), NEG_INF)  # log (1 - p_gen)
        index = copy_ids if weights.dim() == 2 else copy_ids.unsqueeze(1).expand(-1, weights.size(1), -1)
        attention = weights.new_zeros(*weights.shape[:-1], width).scatter_add_(-1, index, weights)  # sum_{i: w_i = w} a_i
        # log of the copy mass, -inf where it is 0; the clamp keeps the unused branch's gradient finite
        log_attention = torch.where(attention > 0, attention.clamp(min=torch.finfo(dtype).tiny).log(), NEG_INF)
        log_copy = log_copy_gate + log_attention  # (rows, [tgt_len,] width)
        log_vocab = log_gen + torch.log_softmax(logits.to(dtype), dim=-1)  # (rows, [tgt_len,] V), finite
        target_size = logits.size(-1)
        # eq. 9: the vocabulary's ids mix both parts; the temporary ids come from copying alone
        mixed = torch.logaddexp(log_vocab, log_copy[..., :target_size])
        return torch.cat([mixed, log_copy[..., target_size:]], dim=-1)


def mixture_loss(log_probs: Tensor, target: Tensor, *, ignore_index: int, label_smoothing: float = 0.0,
                 vocab_size: int) -> Tensor:
    """The summed NLL of the mixture, label-smoothed as F.cross_entropy smooths: row i's loss is
    (1 - eps) (-log P(y_i)) + eps * mean over the V vocabulary ids of -log P(w). The uniform part
    spreads over the fixed vocabulary only: a temporary id that no source token of the row has is
    impossible (probability 0), not a class to smooth towards.

    log_probs (..., width) float32 from PointerGenerator; target (...) long extended ids, positions
    equal to `ignore_index` left out. A target's log P is floored at log(float32 tiny), about -87,
    should its attention ever underflow to exactly 0: the loss stays finite, never log 0."""
    real = target != ignore_index  # (...)
    picked = log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1).clamp(min=LOG_TINY)  # (...) log P(y)
    nll = -picked
    if label_smoothing:
        nll = (1 - label_smoothing) * nll - label_smoothing * log_probs[..., :vocab_size].mean(dim=-1)
    return torch.where(real, nll, 0.0).sum()
