"""Decoders: one step at a time equals the teacher-forced pass; beam reordering and repetition."""
from __future__ import annotations

import pytest
import torch
from step_decoding import assert_alone_equals_in_batch, decode_step_by_step

from heed.nn.build import ModelConfig, build_model
from heed.nn.protocol import TensorState
from heed.nn.rnn.decoder import DecoderState
from heed.nn.rnn.seq2seq import Seq2Seq

SRC_VOCAB, TGT_VOCAB = 11, 13
SRC_LENGTHS = torch.tensor([6, 3, 1, 4])
SRC_LEN, TGT_LEN = 7, 5  # the source batch carries an extra column of padding

SMALL = dict(embed_size=6, hidden_size=8, dropout=0.3)  # dropout > 0: eval() must switch it off

CONFIGS = {
    "luong_feed_general": dict(decoder="luong"),
    "luong_nofeed_general": dict(decoder="luong", input_feeding=False),
    "luong_nofeed_dot": dict(decoder="luong", input_feeding=False, attention="dot"),
    "luong_nofeed_cosine": dict(decoder="luong", input_feeding=False, attention="cosine"),
    "luong_nofeed_additive": dict(decoder="luong", input_feeding=False, attention="additive"),
    "luong_feed_scaled_dot": dict(decoder="luong", attention="scaled_dot"),
    "bahdanau_additive": dict(decoder="bahdanau"),
    "bahdanau_general": dict(decoder="bahdanau", attention="general"),
    "plain": dict(decoder="plain"),
    "luong_feed_2layers": dict(decoder="luong", encoder_layers=2, decoder_layers=2),
    "luong_nofeed_2layers_linear": dict(decoder="luong", input_feeding=False, encoder_layers=2,
                                        decoder_layers=2, bridge="linear"),
    "bahdanau_2layers": dict(decoder="bahdanau", encoder_layers=2, decoder_layers=2),
    "plain_2layers_linear": dict(decoder="plain", encoder_layers=1, decoder_layers=2, bridge="linear"),
    "luong_feed_gru": dict(decoder="luong", rnn="gru"),
    "luong_nofeed_gru": dict(decoder="luong", rnn="gru", input_feeding=False),
    "bahdanau_gru": dict(decoder="bahdanau", rnn="gru"),
    "plain_gru": dict(decoder="plain", rnn="gru"),
    "luong_unidirectional_zeros": dict(decoder="luong", bidirectional=False, bridge="zeros"),
}


def make_model(**overrides) -> Seq2Seq:
    cfg = ModelConfig(**{**SMALL, **overrides})
    return build_model(cfg, src_vocab_size=SRC_VOCAB, tgt_vocab_size=TGT_VOCAB).double().eval()


def make_batch():
    """src (batch, src_len) padded with 0, tgt_in (batch, tgt_len) starting with BOS = 1."""
    batch = len(SRC_LENGTHS)
    src = torch.randint(3, SRC_VOCAB, (batch, SRC_LEN))
    src = src.masked_fill(torch.arange(SRC_LEN) >= SRC_LENGTHS.unsqueeze(1), 0)
    tgt_in = torch.randint(3, TGT_VOCAB, (batch, TGT_LEN))
    tgt_in[:, 0] = 1
    return src, tgt_in


@pytest.mark.parametrize("need_attention", [True, False], ids=["weights", "fused"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_step_by_step_decoding_equals_teacher_forced_pass(name: str, need_attention: bool) -> None:
    model = make_model(**CONFIGS[name])
    src, tgt_in = make_batch()
    with torch.no_grad():
        step_logits, step_attention = decode_step_by_step(model, src, SRC_LENGTHS, tgt_in)
        forced = model(src, SRC_LENGTHS, tgt_in, need_attention=need_attention)
    assert forced.logits.shape == (len(SRC_LENGTHS), TGT_LEN, TGT_VOCAB)
    torch.testing.assert_close(forced.logits, step_logits, rtol=0, atol=1e-10)
    if not model.has_attention:
        assert step_attention is None and forced.attention is None
    elif need_attention:
        torch.testing.assert_close(forced.attention, step_attention, rtol=0, atol=1e-10)
    else:
        assert forced.attention is None


@pytest.mark.parametrize("name", [n for n in CONFIGS if not n.startswith("plain")])
def test_decoder_attention_rows_sum_to_one_and_skip_padding(name: str) -> None:
    model = make_model(**CONFIGS[name])
    src, tgt_in = make_batch()
    with torch.no_grad():
        attention = model(src, SRC_LENGTHS, tgt_in).attention  # (batch, tgt_len, src_len)
    assert attention.shape == (len(SRC_LENGTHS), TGT_LEN, SRC_LEN)
    padding = (torch.arange(SRC_LEN) >= SRC_LENGTHS.unsqueeze(1)).unsqueeze(1).expand_as(attention)
    assert torch.equal(attention[padding], torch.zeros_like(attention[padding]))
    torch.testing.assert_close(attention.sum(-1), torch.ones(len(SRC_LENGTHS), TGT_LEN, dtype=torch.float64))


@pytest.mark.parametrize("name", ["luong_feed_general", "luong_nofeed_dot", "bahdanau_additive", "plain"])
def test_a_sentence_decodes_the_same_alone_as_in_a_padded_batch(name: str) -> None:
    model = make_model(**CONFIGS[name])
    src, tgt_in = make_batch()
    assert_alone_equals_in_batch(model, src, SRC_LENGTHS, tgt_in)


def test_decoder_state_is_named_tensors_and_select_reorders_every_one_by_batch_row() -> None:
    h, c = torch.randn(2, 3, 4), torch.randn(2, 3, 4)  # (layers, batch, hidden)
    feed, coverage = torch.randn(3, 4), torch.rand(3, 5)  # (batch, hidden), (batch, src_len)
    indices = torch.tensor([2, 0, 0, 1])
    state = DecoderState.of((h, c), feed, coverage)
    assert isinstance(state, TensorState) and list(state.tensors) == ["h", "c", "feed", "coverage"]
    picked = state.select(indices)
    assert isinstance(picked, DecoderState)
    assert torch.equal(picked.rnn[0], h[:, [2, 0, 0, 1]])
    assert torch.equal(picked.rnn[1], c[:, [2, 0, 0, 1]])
    assert torch.equal(picked.feed, feed[[2, 0, 0, 1]])
    assert torch.equal(picked.coverage, coverage[[2, 0, 0, 1]])
    no_feed = DecoderState.of((h,)).select(indices)  # a GRU without input feeding or coverage
    assert list(no_feed.tensors) == ["h"] and no_feed.feed is None and no_feed.coverage is None
    assert len(no_feed.rnn) == 1 and torch.equal(no_feed.rnn[0], h[:, [2, 0, 0, 1]])


@pytest.mark.parametrize("name", ["luong_feed_general", "luong_nofeed_dot", "bahdanau_additive", "plain",
                                  "luong_feed_gru", "bahdanau_2layers"])
def test_decoding_a_repeated_batch_equals_decoding_the_original_rows(name: str) -> None:
    model = make_model(**CONFIGS[name])
    src, tgt_in = make_batch()
    beam = 3
    with torch.no_grad():
        logits, attention = decode_step_by_step(model, src, SRC_LENGTHS, tgt_in)
        enc = model.encode(src, SRC_LENGTHS).repeat(beam)  # (batch * beam, ...), each source beam times
        state = model.init_state(enc)
        tokens = tgt_in.repeat_interleave(beam, dim=0)
        for t in range(TGT_LEN):
            out = model.step(tokens[:, t], state, enc)
            state = out.state
            torch.testing.assert_close(out.logits, logits[:, t].repeat_interleave(beam, dim=0), rtol=0, atol=1e-12)
            if attention is not None:
                torch.testing.assert_close(out.attention, attention[:, t].repeat_interleave(beam, dim=0),
                                           rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["luong_feed_general", "luong_nofeed_dot", "bahdanau_additive", "plain",
                                  "luong_feed_gru", "bahdanau_2layers"])
def test_select_after_a_step_equals_having_fed_the_selected_tokens(name: str) -> None:
    # Beam reordering: with two beams per source, step 1 feeds token a to beam 0 and b to beam 1.
    # Swapping the beams with state.select must leave exactly the state we would have had by
    # feeding b to beam 0 and a to beam 1 in the first place; step 2 then gives the same logits.
    model = make_model(**CONFIGS[name])
    src, _ = make_batch()
    batch, beam = len(SRC_LENGTHS), 2
    swap = torch.arange(batch * beam).view(batch, beam).flip(1).reshape(-1)  # [1, 0, 3, 2, ...]
    first = torch.randint(3, TGT_VOCAB, (batch * beam,))
    second = torch.randint(3, TGT_VOCAB, (batch * beam,))
    with torch.no_grad():
        enc = model.encode(src, SRC_LENGTHS).repeat(beam)
        start = model.init_state(enc)
        reordered = model.step(first, start, enc).state.select(swap)
        fed_swapped = model.step(first[swap], start, enc).state
        a, b = model.step(second, reordered, enc), model.step(second, fed_swapped, enc)
    torch.testing.assert_close(a.logits, b.logits, rtol=0, atol=1e-12)
    for x, y in zip(a.state.rnn, b.state.rnn, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-12)
