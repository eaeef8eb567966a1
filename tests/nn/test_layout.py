"""heed.nn.layout: column-major decoder weights change strides only, never a value or an output."""
from __future__ import annotations

import io

import pytest
import torch

from heed.nn.build import ModelConfig, build_model
from heed.nn.layout import column_major, for_decoding
from heed.nn.seq2seq import Seq2Seq

SRC_VOCAB, TGT_VOCAB = 11, 13
SRC_LENGTHS = torch.tensor([6, 3, 1, 4])
CONFIGS = {  # every decoder, RNN kind and extra module (W_c, readout, additive W_q/v, layers)
    "luong_feed_general": dict(decoder="luong"),
    "luong_nofeed_additive": dict(decoder="luong", input_feeding=False, attention="additive"),
    "bahdanau_additive": dict(decoder="bahdanau"),
    "plain_gru": dict(decoder="plain", rnn="gru"),
    "luong_feed_2layers": dict(decoder="luong", encoder_layers=2, decoder_layers=2),
    "luong_feed_gru": dict(decoder="luong", rnn="gru"),
}


def make_model(**overrides) -> Seq2Seq:
    cfg = ModelConfig(embed_size=6, hidden_size=8, **overrides)
    return build_model(cfg, src_vocab_size=SRC_VOCAB, tgt_vocab_size=TGT_VOCAB).double().eval()


def make_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """src (4, 7) padded with 0, tgt_in (4, 5) starting with BOS = 1."""
    src = torch.randint(3, SRC_VOCAB, (4, 7)).masked_fill(torch.arange(7) >= SRC_LENGTHS.unsqueeze(1), 0)
    tgt_in = torch.randint(3, TGT_VOCAB, (4, 5))
    tgt_in[:, 0] = 1
    return src, tgt_in


def decode_step_by_step(model: Seq2Seq, src, src_lengths, tgt_in) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Search's protocol (encode, init_state, step): logits (batch, tgt_len, vocab), attention or None."""
    enc = model.encode(src, src_lengths)
    state = model.init_state(enc)
    logits, attention = [], []
    for t in range(tgt_in.size(1)):
        out = model.step(tgt_in[:, t], state, enc)
        state = out.state
        logits.append(out.logits)
        attention.append(out.attention)
    return torch.stack(logits, dim=1), None if attention[0] is None else torch.stack(attention, dim=1)


def test_column_major_keeps_the_values_and_makes_the_transpose_contiguous() -> None:
    w = torch.randn(5, 3)
    out = column_major(w)
    assert out.shape == (5, 3) and out.stride() == (1, 5)
    assert not out.is_contiguous() and out.t().is_contiguous()
    assert torch.equal(out, w)


def matrices(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p for name, p in module.named_parameters() if p.dim() == 2}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_for_decoding_lays_out_every_multiplied_decoder_matrix_and_changes_no_output(name: str) -> None:
    model = make_model(**CONFIGS[name])
    src, tgt_in = make_batch()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    encoder_strides = [p.stride() for p in model.encoder.parameters()]
    with torch.no_grad():
        ref_steps, ref_weights = decode_step_by_step(model, src, SRC_LENGTHS, tgt_in)
        ref_forced = model(src, SRC_LENGTHS, tgt_in).logits
        for_decoding(model.decoder)
        steps, weights = decode_step_by_step(model, src, SRC_LENGTHS, tgt_in)
        forced = model(src, SRC_LENGTHS, tgt_in).logits

    for key, value in matrices(model.decoder).items():
        if key == "embedding.weight":
            assert value.is_contiguous(), key  # looked up, not multiplied: left alone
        else:
            assert value.t().is_contiguous(), key
            assert min(value.shape) == 1 or not value.is_contiguous(), key  # a vector is both
    assert [p.stride() for p in model.encoder.parameters()] == encoder_strides  # runs once a source
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    torch.testing.assert_close(steps, ref_steps, rtol=0, atol=1e-12)
    torch.testing.assert_close(forced, ref_forced, rtol=0, atol=1e-12)
    if ref_weights is not None:
        torch.testing.assert_close(weights, ref_weights, rtol=0, atol=1e-12)


def test_a_laid_out_model_saves_and_loads_into_a_fresh_one() -> None:
    model = make_model(**CONFIGS["luong_feed_general"])
    for_decoding(model.decoder)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    fresh = make_model(**CONFIGS["luong_feed_general"])
    fresh.load_state_dict(torch.load(buffer))
    src, tgt_in = make_batch()
    with torch.no_grad():
        torch.testing.assert_close(fresh(src, SRC_LENGTHS, tgt_in).logits, model(src, SRC_LENGTHS, tgt_in).logits,
                                   rtol=0, atol=0)
