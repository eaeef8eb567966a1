"""The model owns its loss: `Seq2Seq.loss(batch)` -> SeqLoss(total, cross_entropy, coverage), each summed
over the real target tokens; and `Seq2Seq.encode` keeps the source ids in EncoderOutput.src through
`repeat` and `select` (what a copy mechanism reads)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from heed.nn.build import ModelConfig, build_model
from heed.nn.loss import SeqLoss
from heed.nn.masks import lengths_to_mask

PAD = 0


def make_batch(vocab: int = 9) -> SimpleNamespace:
    """Any object with src, src_lengths, tgt_in, tgt_out will do (heed.nn never imports heed.data)."""
    gen = torch.Generator().manual_seed(3)
    src_lengths = torch.tensor([4, 2, 3])
    src = torch.randint(3, vocab, (3, 4), generator=gen).masked_fill(~lengths_to_mask(src_lengths, 4), PAD)
    tgt_lengths = torch.tensor([3, 5, 1])
    tgt_out = torch.randint(3, vocab, (3, 5), generator=gen).masked_fill(~lengths_to_mask(tgt_lengths, 5), PAD)
    tgt_in = torch.cat([torch.ones(3, 1, dtype=torch.long), tgt_out[:, :-1]], dim=1).masked_fill(tgt_out == PAD, PAD)
    return SimpleNamespace(src=src, src_lengths=src_lengths, tgt_in=tgt_in, tgt_out=tgt_out)


@pytest.mark.parametrize("decoder", ["luong", "bahdanau", "plain"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_is_the_summed_cross_entropy_of_the_teacher_forced_logits(decoder, eps) -> None:
    model = build_model(ModelConfig(decoder=decoder, hidden_size=8, embed_size=6, dropout=0.0),
                        src_vocab_size=9, tgt_vocab_size=9).double()
    batch = make_batch()
    loss = model.loss(batch, label_smoothing=eps)
    assert isinstance(loss, SeqLoss) and loss.coverage is None
    logits = model(batch.src, batch.src_lengths, batch.tgt_in).logits
    expected = F.cross_entropy(logits.reshape(-1, 9), batch.tgt_out.reshape(-1), ignore_index=PAD,
                               label_smoothing=eps, reduction="sum")
    torch.testing.assert_close(loss.cross_entropy, expected)
    torch.testing.assert_close(loss.total, expected)
    assert loss.total.dim() == 0


def test_loss_gradients_equal_those_of_the_plain_cross_entropy() -> None:
    model = build_model(ModelConfig(hidden_size=8, embed_size=6, dropout=0.0), src_vocab_size=9,
                        tgt_vocab_size=9).double()
    batch = make_batch()
    params = list(model.parameters())
    got = torch.autograd.grad(model.loss(batch).total, params, allow_unused=True)
    logits = model(batch.src, batch.src_lengths, batch.tgt_in).logits
    ref = F.cross_entropy(logits.reshape(-1, 9), batch.tgt_out.reshape(-1), ignore_index=PAD, reduction="sum")
    want = torch.autograd.grad(ref, params, allow_unused=True)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
        else:
            torch.testing.assert_close(g, w)


def test_encode_keeps_the_source_ids_through_repeat_and_select() -> None:
    model = build_model(ModelConfig(hidden_size=8, embed_size=6, dropout=0.0), src_vocab_size=9,
                        tgt_vocab_size=9).eval()
    batch = make_batch()
    enc = model.encode(batch.src, batch.src_lengths)
    assert torch.equal(enc.src, batch.src)
    beams = enc.repeat(2)
    assert torch.equal(beams.src, batch.src)  # one copy per source, as the states
    kept = beams.select(torch.tensor([2, 0]))
    assert torch.equal(kept.src, batch.src[[2, 0]])
    assert torch.equal(kept.with_keys(None).src, batch.src[[2, 0]])
