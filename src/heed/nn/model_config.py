"""The model's config: `model:` in a config file. Plain pydantic, no torch, so reading a config
(heed.config) loads no model code; heed.nn.build makes the model from it."""
from __future__ import annotations

import warnings
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

ScoreName = Literal["dot", "general", "additive", "scaled_dot", "cosine", "location"]

DEFAULT_SCORE: dict[str, ScoreName] = {"luong": "general", "bahdanau": "additive"}


# `model.copy` is the name users write; it hides pydantic's deprecated BaseModel.copy (use
# model_copy), which pydantic warns about when the class is created: only that warning is silenced.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "copy" in "ModelConfig" shadows', category=UserWarning)

    class ModelConfig(BaseModel):
        """Architecture. `hidden_size` is the encoder's output size (both directions together) and the
        decoder's hidden size."""

        model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # as heed.config's sections

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


__all__ = ["DEFAULT_SCORE", "ModelConfig", "ScoreName"]
