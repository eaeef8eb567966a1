"""Decoding checks shared by the nn tests (tests/nn/test_decoder.py, test_attention_family.py,
test_copy.py), written once: the step-by-step decode that DESIGN.md's "step-by-step decoding
equals the teacher-forced pass" compares against, and "a sentence decodes the same alone as in
a padded batch"."""
from __future__ import annotations

import torch
from torch import Tensor

from heed.nn.rnn.seq2seq import Seq2Seq


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


def assert_alone_equals_in_batch(model: Seq2Seq, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> None:
    """Each sentence decoded alone, unpadded, gives the logits and attention its row of the padded
    batch gives. A copy model's alone pass has fewer extended ids (vocab + its own unknowns): the
    batch row's ids past them, other sentences' temporary ids, must have probability 0."""
    with torch.no_grad():
        batch_out = model(src, src_lengths, tgt_in)
        for b, n in enumerate(src_lengths.tolist()):
            alone = model(src[b:b + 1, :n], src_lengths[b:b + 1], tgt_in[b:b + 1])
            width = alone.logits.size(-1)
            torch.testing.assert_close(batch_out.logits[b, :, :width], alone.logits[0], rtol=0, atol=1e-10)
            assert torch.isneginf(batch_out.logits[b, :, width:]).all()
            if alone.attention is None:  # a model without attention (the plain decoder)
                assert batch_out.attention is None
            else:
                torch.testing.assert_close(batch_out.attention[b, :, :n], alone.attention[0], rtol=0, atol=1e-10)
