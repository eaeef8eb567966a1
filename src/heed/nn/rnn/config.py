"""The RNN family's `model:` section: the encoder, the decoder (Luong, Bahdanau or plain), its
attention score and the attention's options (local window, coverage, copy). Plain pydantic, no
torch; heed.nn.rnn.build makes the model from it."""
from __future__ import annotations

import warnings
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from heed.nn.family_config import FamilyConfig
from heed.plumbing.limits import MAX_LAYERS

ScoreName = Literal["dot", "general", "additive", "scaled_dot", "cosine", "location"]

DEFAULT_SCORE: dict[str, ScoreName] = {"luong": "general", "bahdanau": "additive"}

_PLAIN_HAS_NO_ATTENTION = {
    "attention_window": "the plain decoder has no attention to make local; remove attention_window or use decoder "
                        "luong or bahdanau",
    "copy": "copy attention copies where the decoder attends, and the plain decoder has no attention; use decoder "
            "luong or bahdanau, or set copy: false",
}

# `model.copy` is the name users write; it hides pydantic's deprecated BaseModel.copy (use
# model_copy), which pydantic warns about when the class is created: only that warning is silenced.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "copy" in "RNNConfig" shadows', category=UserWarning)

    class RNNConfig(FamilyConfig):
        """The RNN family: a (bi)LSTM/GRU encoder and a Luong, Bahdanau or plain decoder.
        `hidden_size` is the encoder's output size (both directions together) and the decoder's
        hidden size."""

        family: Literal["rnn"] = Field("rnn", description="the model family: rnn (encoder-decoder RNNs with "
                                                          "attention) or transformer (Vaswani et al. 2017)")
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
        encoder_layers: int = Field(1, ge=1, le=MAX_LAYERS, description="stacked encoder RNN layers")
        decoder_layers: int = Field(1, ge=1, le=MAX_LAYERS, description="stacked decoder RNN layers")
        bidirectional: bool = Field(True, description="the encoder reads both ways (each direction hidden_size / 2)")
        bridge: Literal["copy", "linear", "zeros"] = Field(
            "copy", description="the decoder's initial state from the encoder's final one: copied, a learnt "
                                "linear map with tanh, or zeros")
        dropout: float = Field(0.2, ge=0.0, lt=1.0, description="dropout on embeddings and between layers")

        @field_validator("attention_positions")
        @classmethod
        def _positions_with_location(cls, value: int | None, info: ValidationInfo) -> int | None:
            if "attention" not in info.data:
                return value  # the score itself is invalid
            location = info.data["attention"] == "location"
            if location and value is None:
                raise ValueError("the location score needs attention_positions, the longest source (in tokens, </s> "
                                 "included) it scores; a config file fills it in from data.max_src_len + 1")
            if value is not None and not location:
                raise ValueError("attention_positions is for 'attention: location' only; remove it")
            return value

        @model_validator(mode="after")
        def _needs_attention(self) -> RNNConfig:
            """A local window (any int: its own bound refuses 0) or copy attention on the plain decoder,
            refused at the field's own location. A model validator, not a field one: `copy` is
            FamilyConfig's field, validated before `decoder` is."""
            for name in ("attention_window", "copy"):
                value = getattr(self, name)
                if value not in (None, False) and self.decoder == "plain":
                    raise ValidationError.from_exception_data(type(self).__name__, [InitErrorDetails(
                        type=PydanticCustomError("value_error", _PLAIN_HAS_NO_ATTENTION[name]), loc=(name,),
                        input=value)])
            return self

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
        def _check(self) -> RNNConfig:
            if self.bidirectional and self.hidden_size % 2:
                raise ValueError("hidden_size must be even for a bidirectional encoder (each direction gets half)")
            if self.bridge == "copy" and self.encoder_layers < self.decoder_layers:
                raise ValueError("bridge 'copy' needs encoder_layers >= decoder_layers; use bridge: linear")
            if self.decoder == "plain" and self.attention is not None:
                raise ValueError("the plain decoder has no attention; remove 'attention'")
            return self

        @classmethod
        def complete(cls, model: dict[str, Any], data: Any) -> dict[str, Any]:
            """`decoder: plain` with an `attention:` score (left over from a config for luong, or set in
            a base config) means "no attention": the score is dropped, so the saved config says null
            and switching the decoder is one edit, not two. The location score (Luong et al. 2015,
            eq. 8) has one weight row per source position, so it needs the longest source: unless
            `attention_positions` is given, the longest the model trains on and translates,
            `data.max_src_len` (`data`: the section with its defaults), + 1 for the </s> the encoder reads. The number is saved with the
            config, so a checkpoint rebuilds the same shape whatever the data section says later."""
            if model.get("decoder") == "plain" and model.get("attention") is not None:
                model = {k: v for k, v in model.items() if k != "attention_positions"}  # the location score's
                return {**model, "attention": None}
            if model.get("attention") != "location" or model.get("attention_positions") is not None:
                return model
            longest = data.get("max_src_len") if isinstance(data, dict) else getattr(data, "max_src_len", None)
            if isinstance(longest, bool) or not isinstance(longest, int) or longest < 1:
                return model  # data.max_src_len's own error says what is wrong
            return {**model, "attention_positions": longest + 1}

        @property
        def score(self) -> ScoreName | None:
            return self.attention or DEFAULT_SCORE.get(self.decoder)

        @property
        def kind(self) -> str:
            """What the model is, in words a log line or a page shows: its decoder."""
            return self.decoder

        @property
        def attention_grid(self) -> tuple[int, int] | None:
            """One attention, as one layer of one head; none for the plain decoder."""
            return None if self.decoder == "plain" else (1, 1)


def describe(cfg: RNNConfig) -> str:
    return f"{cfg.decoder} attention, {cfg.attention or 'default'} score"


def sizes(cfg: RNNConfig) -> str:
    return f"model.hidden_size {cfg.hidden_size}, model.embed_size {cfg.embed_size}"
