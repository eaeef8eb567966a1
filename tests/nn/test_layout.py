"""heed.nn.layout: column-major decoder weights change strides only, never a value or an output."""
from __future__ import annotations

import io

import pytest
import torch

from heed.nn.build import ModelConfig, build_model
from heed.nn.layout import column_major, for_decoding
from heed.nn.rnn.seq2seq import Seq2Seq
from heed.search import DecodeConfig, beam_search

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


def beam(model: Seq2Seq, src: torch.Tensor) -> list[tuple[list[int], float, torch.Tensor | None]]:
    """Search's use of the model (encode, init_state, step, select): tokens, score, attention of
    the 2 best of a beam of 3, for every sentence."""
    cfg = DecodeConfig(beam_size=3, n_best=2, max_len_a=1.0, max_len_b=2)
    return [(h.tokens, h.score, h.attention) for hyps in beam_search(model, src, SRC_LENGTHS, cfg) for h in hyps]


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
        ref_search, ref_forced = beam(model, src), model(src, SRC_LENGTHS, tgt_in)
        for_decoding(model.decoder)
        search, forced = beam(model, src), model(src, SRC_LENGTHS, tgt_in)

    for key, value in matrices(model.decoder).items():
        if key == "embedding.weight":
            assert value.is_contiguous(), key  # looked up, not multiplied: left alone
        else:
            assert value.t().is_contiguous(), key
            assert min(value.shape) == 1 or not value.is_contiguous(), key  # a vector is both
    assert [p.stride() for p in model.encoder.parameters()] == encoder_strides  # runs once a source
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    assert [tokens for tokens, _, _ in search] == [tokens for tokens, _, _ in ref_search]
    for (_, score, attention), (_, ref_score, ref_attention) in zip(search, ref_search):
        assert score == pytest.approx(ref_score, abs=1e-12)
        assert (attention is None) == (ref_attention is None)
        if attention is not None:
            torch.testing.assert_close(attention, ref_attention, rtol=0, atol=1e-12)
    torch.testing.assert_close(forced.logits, ref_forced.logits, rtol=0, atol=1e-12)
    if ref_forced.attention is not None:
        torch.testing.assert_close(forced.attention, ref_forced.attention, rtol=0, atol=1e-12)


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
        # Same values, but a column-major weight may take another GEMM kernel (its own summation
        # order): equal up to a few float64 ulps of logits of size ~1 (AVX2 showed 5.6e-17), not bitwise.
        torch.testing.assert_close(fresh(src, SRC_LENGTHS, tgt_in).logits, model(src, SRC_LENGTHS, tgt_in).logits,
                                   rtol=1e-14, atol=1e-14)
