"""Coverage (Tu et al. 2016; See et al. 2017): how much attention each source position has had so far.

    c^t = sum_{t' < t} a^{t'}                       (batch, src_len), c^0 = 0   (See et al. 2017, eq. 10)
    e_i^t = v . tanh(W_h h_i + W_s s_t + w_c c_i^t + b)                        (eq. 11, heed.nn.rnn.attention)
    covloss_t = sum_i min(a_i^t, c_i^t)                                        (eq. 12)
    loss = cross-entropy + lambda * sum_t covloss_t                            (eq. 13, summed, not averaged)

The decoder carries c^t in its DecoderState (so beam search reorders it with `select`), adds each
step's weights to it, and feeds it to the additive score. Padding has weight exactly 0 (the one
masked_softmax), so it adds exactly 0 to the coverage. The loss penalises attending again to what is
already covered: the repetition a decoder without coverage falls into.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def initial_coverage(rows: int, states: Tensor) -> Tensor:
    """c^0 = 0 for `rows` decoder rows over the source `states` (batch, src_len, hidden): (rows, src_len),
    float32 at least (a bf16 or fp16 running sum would stop growing past 256 steps' worth of small weights)."""
    dtype = torch.promote_types(states.dtype, torch.float32)
    return states.new_zeros(rows, states.size(1), dtype=dtype)


def coverage_loss(weights: Tensor, tgt_mask: Tensor) -> Tensor:
    """See et al. 2017, eq. 12, summed over the real target steps: sum over t with tgt_mask and over
    source positions i of min(a_i^t, c_i^t), c^t = sum_{t' < t} a^{t'}.

    weights (batch, tgt_len, src_len) the teacher-forced pass's attention; tgt_mask bool (batch,
    tgt_len), True = real target token. Returns a scalar in float32 (float64 for float64 weights).
    Unweighted: the caller multiplies by lambda."""
    weights = weights.to(torch.promote_types(weights.dtype, torch.float32))
    so_far = F.pad(weights[:, :-1].cumsum(dim=1), (0, 0, 1, 0))  # c^t (batch, tgt_len, src_len): c^0 = 0
    per_step = torch.minimum(weights, so_far).sum(dim=-1)  # (batch, tgt_len)
    return per_step.masked_fill(~tgt_mask, 0.0).sum()
