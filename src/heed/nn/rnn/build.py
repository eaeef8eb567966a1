"""The RNN family's builder: a model config (family rnn) -> Seq2Seq."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from heed.nn.rnn.config import RNNConfig
from heed.nn.rnn.decoder import BahdanauDecoder, LuongDecoder, PlainDecoder, RNNDecoder
from heed.nn.rnn.encoder import Bridge, RNNEncoder, RNNKind
from heed.nn.rnn.seq2seq import Seq2Seq


class _Sizes(TypedDict):
    """The keyword arguments every decoder takes."""

    vocab_size: int
    embed_size: int
    hidden_size: int
    memory_size: int
    num_layers: int
    rnn: RNNKind
    dropout: float
    pad_id: int


class _Attention(TypedDict):
    """The keyword arguments of the decoders with attention, besides their score."""

    attention_hidden: int | None
    attention_positions: int | None
    attention_window: int | None
    coverage: bool
    copy_source_to_target: Sequence[int] | None
    unk_id: int


def build_rnn(cfg: RNNConfig, *, src_vocab_size: int, tgt_vocab_size: int, pad_id: int, bos_id: int, eos_id: int,
              unk_id: int, source_to_target: Sequence[int] | None) -> Seq2Seq:
    encoder = RNNEncoder(vocab_size=src_vocab_size, embed_size=cfg.embed_size, hidden_size=cfg.hidden_size,
                         num_layers=cfg.encoder_layers, rnn=cfg.rnn, bidirectional=cfg.bidirectional,
                         dropout=cfg.dropout, pad_id=pad_id)
    bridge = Bridge(cfg.bridge, enc_hidden=cfg.hidden_size, enc_layers=cfg.encoder_layers,
                    dec_hidden=cfg.hidden_size, dec_layers=cfg.decoder_layers,
                    num_tensors=2 if cfg.rnn == "lstm" else 1)
    common = _Sizes(vocab_size=tgt_vocab_size, embed_size=cfg.embed_size, hidden_size=cfg.hidden_size,
                    memory_size=cfg.hidden_size, num_layers=cfg.decoder_layers, rnn=cfg.rnn,
                    dropout=cfg.dropout, pad_id=pad_id)
    attention = _Attention(attention_hidden=cfg.attention_hidden, attention_positions=cfg.attention_positions,
                           attention_window=cfg.attention_window, coverage=cfg.coverage,
                           copy_source_to_target=source_to_target if cfg.copy else None, unk_id=unk_id)
    decoder: RNNDecoder
    score = cfg.score  # None only for the plain decoder
    if cfg.decoder == "luong":
        assert score is not None
        decoder = LuongDecoder(score=score, input_feeding=cfg.input_feeding, **attention, **common)
    elif cfg.decoder == "bahdanau":
        assert score is not None
        decoder = BahdanauDecoder(score=score, **attention, **common)
    else:
        decoder = PlainDecoder(**common)
    return Seq2Seq(encoder, bridge, decoder, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id, unk_id=unk_id,
                   coverage_loss=cfg.coverage_loss)
