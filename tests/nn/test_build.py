"""ModelConfig validation and build_model."""
from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from heed.nn.build import ModelConfig, build_model
from heed.nn.rnn.decoder import BahdanauDecoder, LuongDecoder, PlainDecoder


def test_unknown_key_is_an_error_naming_it() -> None:
    with pytest.raises(ValidationError, match="hiden_size"):
        ModelConfig(hiden_size=128)


def test_odd_hidden_size_with_bidirectional_encoder_is_an_error() -> None:
    with pytest.raises(ValidationError, match="hidden_size must be even"):
        ModelConfig(hidden_size=255, bidirectional=True)
    assert ModelConfig(hidden_size=255, bidirectional=False).hidden_size == 255


def test_copy_bridge_needs_enough_encoder_layers() -> None:
    with pytest.raises(ValidationError, match="encoder_layers >= decoder_layers"):
        ModelConfig(encoder_layers=1, decoder_layers=2, bridge="copy")
    ModelConfig(encoder_layers=1, decoder_layers=2, bridge="linear")


def test_plain_decoder_with_an_attention_score_is_an_error() -> None:
    with pytest.raises(ValidationError, match="plain decoder has no attention"):
        ModelConfig(decoder="plain", attention="dot")


@pytest.mark.parametrize("decoder,score", [("luong", "general"), ("bahdanau", "additive"), ("plain", None)])
def test_default_score_per_decoder(decoder: str, score: str | None) -> None:
    assert ModelConfig(decoder=decoder).score == score


def test_a_named_score_overrides_the_default() -> None:
    assert ModelConfig(decoder="bahdanau", attention="dot").score == "dot"


@pytest.mark.parametrize("field,value", [("hidden_size", 0), ("dropout", 1.0), ("encoder_layers", 0),
                                         ("attention", "bilinear"), ("rnn", "transformer")])
def test_out_of_range_values_are_errors(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        ModelConfig(**{field: value})


@pytest.mark.parametrize("decoder,cls,score", [("luong", LuongDecoder, "general"),
                                               ("bahdanau", BahdanauDecoder, "additive"),
                                               ("plain", PlainDecoder, None)])
def test_build_model_uses_the_decoder_and_default_score(decoder: str, cls: type, score: str | None) -> None:
    cfg = ModelConfig(decoder=decoder, embed_size=4, hidden_size=6, encoder_layers=2, decoder_layers=2)
    model = build_model(cfg, src_vocab_size=9, tgt_vocab_size=7)
    assert isinstance(model.decoder, cls)
    assert model.has_attention == (score is not None)
    if score is not None:
        assert model.decoder.attention.score == score
    src = torch.tensor([[3, 4, 5], [6, 0, 0]])
    out = model(src, torch.tensor([3, 1]), torch.tensor([[1, 3], [1, 4]]))
    assert out.logits.shape == (2, 2, 7)
    assert (out.attention is None) == (score is None)
