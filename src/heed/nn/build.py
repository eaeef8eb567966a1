"""The model's config and the one builder that reads it."""
from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import Literal

import torch

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from heed.errors import ConfigError
from heed.nn.attention import ScoreName
from heed.nn.decoder import BahdanauDecoder, LuongDecoder, PlainDecoder, _RNNDecoder
from heed.nn.encoder import Bridge, RNNEncoder
from heed.nn.seq2seq import Seq2Seq

DEFAULT_SCORE: dict[str, ScoreName] = {"luong": "general", "bahdanau": "additive"}


# `model.copy` is the name users write; it hides pydantic's deprecated BaseModel.copy (use
# model_copy), which pydantic warns about when the class is created: only that warning is silenced.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "copy" in "ModelConfig" shadows', category=UserWarning)

    class ModelConfig(BaseModel):
        """Architecture. `hidden_size` is the encoder's output size (both directions together) and the
        decoder's hidden size."""

        model_config = ConfigDict(extra="forbid")

        decoder: Literal["luong", "bahdanau", "plain"] = Field(
            "luong", description="Luong et al. 2015 (attention after the RNN step), Bahdanau et al. 2015 (before "
                                 "it), or plain (no attention: the baseline)")
        attention: ScoreName | None = Field(None, description="score; default general for luong, additive for bahdanau")
        input_feeding: bool = Field(True, description="luong: feed the last attentional state to the next step "
                                                      "(Luong et al. 2015, 3.3)")
        rnn: Literal["lstm", "gru"] = Field("lstm", description="the recurrent cell")
        embed_size: int = Field(256, gt=0, description="token embedding size")
        hidden_size: int = Field(256, gt=0, description="the encoder's output size (both directions together) and "
                                                        "the decoder's hidden size")
        attention_hidden: int | None = Field(None, gt=0, description="additive score's hidden size (default hidden_size)")
        attention_positions: int | None = Field(
            None, gt=0, validate_default=True,
            description="location score only: the source positions its W_a scores (its output size), the longest source "
                        "it attends over; a config file fills it in from data.max_src_len + 1 (for </s>)")
        attention_window: int | None = Field(
            None, ge=1, description="local-p attention (Luong et al. 2015, §3.2) over [p_t - D, p_t + D] with this D "
                                    "(Luong: 10), on top of the score; null = global attention")
        copy: bool = Field(False, description="copy attention, a pointer-generator (See et al. 2017): source tokens the "
                                              "target vocabulary lacks can be copied to the output instead of <unk>; "
                                              "with coverage, See et al.'s full model")
        coverage: bool = Field(
            False, description="coverage attention (Tu et al. 2016; See et al. 2017, eq. 11): the additive score also "
                               "sees how much attention each source position has had so far")
        coverage_loss: float = Field(
            0.0, ge=0.0, description="lambda of See et al. 2017, eq. 13: the coverage loss sum_i min(a_i^t, c_i^t), "
                                     "summed over target tokens, times this is added to the loss (See et al.: 1); "
                                     "needs coverage")
        encoder_layers: int = Field(1, ge=1, description="stacked encoder RNN layers")
        decoder_layers: int = Field(1, ge=1, description="stacked decoder RNN layers")
        bidirectional: bool = Field(True, description="the encoder reads both ways (each direction hidden_size / 2)")
        bridge: Literal["copy", "linear", "zeros"] = Field(
            "copy", description="the decoder's initial state from the encoder's final one: copied, a learnt "
                                "linear map with tanh, or zeros")
        dropout: float = Field(0.2, ge=0.0, lt=1.0, description="dropout on embeddings and between layers")

        @field_validator("attention_positions")
        @classmethod
        def _positions_with_location(cls, value: int | None, info: ValidationInfo) -> int | None:
            if "attention" not in info.data:  # the score itself is invalid; that error says enough
                return value
            location = info.data["attention"] == "location"
            if location and value is None:
                raise ValueError("the location score needs attention_positions, the longest source (in tokens, </s> "
                                 "included) it scores; a config file fills it in from data.max_src_len + 1")
            if value is not None and not location:
                raise ValueError("attention_positions is for 'attention: location' only; remove it")
            return value

        @field_validator("attention_window")
        @classmethod
        def _window_needs_attention(cls, value: int | None, info: ValidationInfo) -> int | None:
            if value is not None and info.data.get("decoder") == "plain":
                raise ValueError("the plain decoder has no attention to make local; remove attention_window "
                                 "or use decoder luong or bahdanau")
            return value

        @field_validator("copy")
        @classmethod
        def _copy_needs_attention(cls, value: bool, info: ValidationInfo) -> bool:
            if value and info.data.get("decoder") == "plain":
                raise ValueError("copy attention copies where the decoder attends, and the plain decoder has no "
                                 "attention; use decoder luong or bahdanau, or set copy: false")
            return value

        @field_validator("coverage")
        @classmethod
        def _coverage_needs_the_additive_score(cls, value: bool, info: ValidationInfo) -> bool:
            if not value or "attention" not in info.data or "decoder" not in info.data:
                return value
            decoder = info.data["decoder"]
            if decoder == "plain":
                raise ValueError("the plain decoder has no attention to cover; use decoder luong or bahdanau")
            score = info.data["attention"] or DEFAULT_SCORE[decoder]
            if score != "additive":
                raise ValueError(f"coverage feeds the additive score (See et al. 2017, eq. 11), not {score!r}; "
                                 "set model.attention: additive")
            return value

        @field_validator("coverage_loss")
        @classmethod
        def _coverage_loss_needs_coverage(cls, value: float, info: ValidationInfo) -> float:
            if value > 0 and info.data.get("coverage") is False:  # absent: coverage itself was invalid
                raise ValueError("the coverage loss needs coverage attention; set model.coverage: true")
            return value

        @model_validator(mode="after")
        def _check(self) -> "ModelConfig":
            if self.bidirectional and self.hidden_size % 2:
                raise ValueError("hidden_size must be even for a bidirectional encoder (each direction gets half)")
            if self.bridge == "copy" and self.encoder_layers < self.decoder_layers:
                raise ValueError("bridge 'copy' needs encoder_layers >= decoder_layers; use bridge: linear")
            if self.decoder == "plain" and self.attention is not None:
                raise ValueError("the plain decoder has no attention; remove 'attention'")
            return self

        @property
        def score(self) -> ScoreName | None:
            return self.attention or DEFAULT_SCORE.get(self.decoder)


def build_model(cfg: ModelConfig, *, src_vocab_size: int, tgt_vocab_size: int, pad_id: int = 0,
                bos_id: int = 1, eos_id: int = 2, unk_id: int = 3,
                source_to_target: Sequence[int] | None = None) -> Seq2Seq:
    """A fresh Seq2Seq for this config and these vocabulary sizes. A copy model (`cfg.copy`) also
    needs `source_to_target`, each source id's target id by string or -1
    (heed.data.extended.source_to_target; heed.pipeline.Codec.source_to_target).

    The model is first built on torch's meta device (shapes, no memory): one whose float32 weights
    alone would not fit in this machine's memory is a ConfigError saying how large it is, before
    the allocator is asked (model.hidden_size: 10^9 made it fail with a traceback)."""
    if cfg.copy and (source_to_target is None or len(source_to_target) != src_vocab_size):
        raise ValueError("a copy model needs source_to_target, one target id (or -1) per source vocabulary id")

    def build() -> Seq2Seq:
        return _build(cfg, src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, pad_id=pad_id,
                      bos_id=bos_id, eos_id=eos_id, unk_id=unk_id, source_to_target=source_to_target)

    check_size(cfg, build, vocab=(src_vocab_size, tgt_vocab_size))
    return build()


def physical_memory() -> int | None:
    """This machine's memory in bytes, where the OS says."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_size(cfg: ModelConfig, build: Callable[[], torch.nn.Module], *, vocab: tuple[int, int]) -> int:
    """The parameter count of the model `build()` makes, counted on the meta device; a ConfigError
    when its float32 weights alone exceed this machine's memory."""
    sizes = f"model.hidden_size {cfg.hidden_size}, model.embed_size {cfg.embed_size}, vocabularies {vocab[0]:,} " \
            f"and {vocab[1]:,}"
    try:
        with torch.device("meta"):
            count = sum(p.numel() for p in build().parameters())
    except (RuntimeError, OverflowError, ValueError):  # "Storage size calculation overflowed"
        raise ConfigError(f"too large: the parameter count overflows ({sizes}); make them smaller",
                          field="model") from None
    memory = physical_memory()
    if memory is not None and count * 4 > memory:
        raise ConfigError(f"too large: {count:,} parameters need {count * 4 / 1e9:,.1f} GB as float32 weights "
                          f"alone, and this machine has {memory / 1e9:,.1f} GB ({sizes}); make them smaller",
                          field="model")
    return count


def _build(cfg: ModelConfig, *, src_vocab_size: int, tgt_vocab_size: int, pad_id: int, bos_id: int, eos_id: int,
           unk_id: int, source_to_target: Sequence[int] | None) -> Seq2Seq:
    encoder = RNNEncoder(vocab_size=src_vocab_size, embed_size=cfg.embed_size, hidden_size=cfg.hidden_size,
                         num_layers=cfg.encoder_layers, rnn=cfg.rnn, bidirectional=cfg.bidirectional,
                         dropout=cfg.dropout, pad_id=pad_id)
    bridge = Bridge(cfg.bridge, enc_hidden=cfg.hidden_size, enc_layers=cfg.encoder_layers,
                    dec_hidden=cfg.hidden_size, dec_layers=cfg.decoder_layers,
                    num_tensors=2 if cfg.rnn == "lstm" else 1)
    common = dict(vocab_size=tgt_vocab_size, embed_size=cfg.embed_size, hidden_size=cfg.hidden_size,
                  memory_size=cfg.hidden_size, num_layers=cfg.decoder_layers, rnn=cfg.rnn,
                  dropout=cfg.dropout, pad_id=pad_id)
    attention = dict(attention_hidden=cfg.attention_hidden, attention_positions=cfg.attention_positions,
                     attention_window=cfg.attention_window, coverage=cfg.coverage)
    decoder: _RNNDecoder
    copy = dict(copy_source_to_target=source_to_target if cfg.copy else None, unk_id=unk_id)
    if cfg.decoder == "luong":
        decoder = LuongDecoder(score=cfg.score, input_feeding=cfg.input_feeding, **copy, **attention, **common)
    elif cfg.decoder == "bahdanau":
        decoder = BahdanauDecoder(score=cfg.score, **copy, **attention, **common)
    else:
        decoder = PlainDecoder(**common)
    return Seq2Seq(encoder, bridge, decoder, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id,
                   coverage_loss=cfg.coverage_loss)
