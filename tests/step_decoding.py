"""The step-by-step decode shared by the nn tests that check it against the teacher-forced pass
(tests/nn/test_decoder.py, test_attention_family.py, test_copy.py): DESIGN.md's "step-by-step
decoding equals the teacher-forced pass", written once."""
from __future__ import annotations

import torch
from torch import Tensor

from heed.nn.seq2seq import Seq2Seq


def decode_step_by_step(model: Seq2Seq, src: Tensor, src_lengths: Tensor,
                        tgt_in: Tensor) -> tuple[Tensor, Tensor | None]:
    """The search protocol: encode, init_state, then step(prev_tokens, state, enc) per position.
    Returns logits (batch, tgt_len, vocab) and attention (batch, tgt_len, src_len), or None for a
    model without attention."""
    enc = model.encode(src, src_lengths)
    state = model.init_state(enc)
    logits, attention = [], []
    for t in range(tgt_in.size(1)):
        out = model.step(tgt_in[:, t], state, enc)
        state = out.state
        logits.append(out.logits)
        attention.append(out.attention)
    weights = None if attention[0] is None else torch.stack(attention, dim=1)
    return torch.stack(logits, dim=1), weights
