"""The model's config: `model:` in a config file. Plain pydantic, no torch, so reading a config
(heed.config) loads no model code; heed.nn.build makes the model from it.

`family` picks the model family (heed.nn.build.FAMILIES): `rnn` (the default, and what every config
and model directory from before families meant) or `transformer`. Each field belongs to a family
(`FAMILY_OF`) or to all; a field of another family is an error naming it, and a saved config lists
only its family's fields."""
from __future__ import annotations

import warnings
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_serializer, model_validator

from heed.plumbing.limits import MAX_LAYERS

ScoreName = Literal["dot", "general", "additive", "scaled_dot", "cosine", "location"]

DEFAULT_SCORE: dict[str, ScoreName] = {"luong": "general", "bahdanau": "additive"}
Family = Literal["rnn", "transformer"]

RNN_FIELDS = ("decoder", "attention", "input_feeding", "rnn", "embed_size", "hidden_size", "attention_hidden",
              "attention_positions", "attention_window", "coverage_loss", "encoder_layers", "decoder_layers",
              "bidirectional", "bridge")
TRANSFORMER_FIELDS = ("layers", "heads", "d_model", "ff_size", "norm", "positions", "max_positions",
                      "tie_embeddings", "share_embeddings", "attention_dropout")


_PLAIN_HAS_NO_ATTENTION = {
    "attention_window": "the plain decoder has no attention to make local; remove attention_window or use decoder "
                        "luong or bahdanau",
    "copy": "copy attention copies where the decoder attends, and the plain decoder has no attention; use decoder "
            "luong or bahdanau, or set copy: false",
}


# `model.copy` is the name users write; it hides pydantic's deprecated BaseModel.copy (use
# model_copy), which pydantic warns about when the class is created: only that warning is silenced.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "copy" in "ModelConfig" shadows', category=UserWarning)

    class ModelConfig(BaseModel):
        """Architecture: the family, then its fields. RNN: `hidden_size` is the encoder's output size
        (both directions together) and the decoder's hidden size. Transformer: `layers` encoder and
        `layers` decoder layers of `d_model` with `heads` heads each."""

        model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # as heed.config's sections

        FAMILY_OF: ClassVar[dict[str, str]] = {**{f: "rnn" for f in RNN_FIELDS},
                                               **{f: "transformer" for f in TRANSFORMER_FIELDS}}

        family: Family = Field("rnn", description="the model family: rnn (encoder-decoder RNNs with attention) or "
                                                  "transformer (Vaswani et al. 2017)")

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
        dropout: float = Field(0.2, ge=0.0, lt=1.0, description="dropout on embeddings and between layers (a "
                                                                 "Transformer: also on every sublayer's output)")
        layers: int = Field(6, ge=1, le=MAX_LAYERS, description="transformer: encoder layers, and as many decoder layers")
        d_model: int = Field(512, gt=0, description="transformer: the size of every layer's input and output")
        heads: int = Field(8, ge=1, description="transformer: attention heads per layer; d_model must be divisible "
                                                "by it")
        ff_size: int = Field(2048, gt=0, description="transformer: the feed-forward network's inner size")
        norm: Literal["pre", "post"] = Field(
            "pre", description="transformer: layer norm before each sublayer (pre: trains without a long warm-up) or "
                               "after its residual sum (post: Vaswani et al. 2017)")
        positions: Literal["sinusoidal", "learned"] = Field(
            "sinusoidal", description="transformer: sinusoidal positions (Vaswani et al. 2017, 3.5) or a learned "
                                      "vector per position")
        max_positions: int = Field(1024, ge=1, description="transformer, learned positions: the positions learned; "
                                                           "later ones read the last")
        tie_embeddings: bool = Field(True, description="transformer: the output layer reuses the target embedding "
                                                       "(Press & Wolf 2017)")
        share_embeddings: bool = Field(False, description="transformer: the encoder reads the target embedding too, "
                                       "one table for both sides (needs data.shared_vocab)")
        attention_dropout: float = Field(0.1, ge=0.0, lt=1.0, description="transformer: dropout on the attention "
                                                                          "weights")

        @field_validator("attention_positions")
        @classmethod
        def _positions_with_location(cls, value: int | None, info: ValidationInfo) -> int | None:
            if "attention" not in info.data or info.data.get("family") != "rnn":
                return value  # the score itself is invalid, or the family check names the foreign field
            location = info.data["attention"] == "location"
            if location and value is None:
                raise ValueError("the location score needs attention_positions, the longest source (in tokens, </s> "
                                 "included) it scores; a config file fills it in from data.max_src_len + 1")
            if value is not None and not location:
                raise ValueError("attention_positions is for 'attention: location' only; remove it")
            return value

        @field_validator("attention_window", "copy")
        @classmethod
        def _needs_attention(cls, value: int | bool | None, info: ValidationInfo) -> int | bool | None:
            """A local window (any int: its own bound refuses 0) or copy attention on the plain decoder."""
            if value not in (None, False) and info.data.get("decoder") == "plain":
                raise ValueError(_PLAIN_HAS_NO_ATTENTION[info.field_name])
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

        @field_validator("heads")
        @classmethod
        def _heads_divide_d_model(cls, value: int, info: ValidationInfo) -> int:
            d_model = info.data.get("d_model")
            if d_model is not None and d_model % value:
                raise ValueError(f"d_model {d_model} is not divisible by heads {value}: each head gets d_model / heads "
                                 f"dimensions; make d_model a multiple of heads (e.g. {value * max(1, round(d_model / value))})")
            return value

        @model_validator(mode="after")
        def _fields_of_family(self) -> "ModelConfig":
            foreign = [f for f in sorted(self.model_fields_set) if self.FAMILY_OF.get(f, self.family) != self.family]
            if foreign:
                owner = self.FAMILY_OF[foreign[0]]
                names = ", ".join(f"'{f}'" for f in foreign)
                raise ValueError(f"{names} {'is a field' if len(foreign) == 1 else 'are fields'} of family {owner}, "
                                 f"not {self.family}; remove {'it' if len(foreign) == 1 else 'them'}"
                                 + (" or set model.family: transformer" if owner == "transformer" else ""))
            if self.family == "transformer":
                for field in ("copy", "coverage"):
                    if getattr(self, field):
                        raise ValueError(f"'{field}' is not supported by the transformer family yet; remove "
                                         f"model.{field} or use family: rnn")
                if self.positions == "sinusoidal" and self.d_model % 2:
                    raise ValueError(f"sinusoidal positions need an even d_model, not {self.d_model}")
            return self

        @model_serializer(mode="wrap")
        def _only_family_fields(self, handler: Any) -> dict[str, Any]:
            """Saved configs list only the family's own fields (and so load back)."""
            data = handler(self)
            return {k: v for k, v in data.items() if self.FAMILY_OF.get(k, self.family) == self.family}

        @model_validator(mode="after")
        def _check(self) -> "ModelConfig":
            if self.family != "rnn":
                return self
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

        @property
        def kind(self) -> str:
            """What the model is, in words a log line or a page shows: the RNN decoder or "transformer"."""
            return self.decoder if self.family == "rnn" else "transformer"

        @property
        def position_limit(self) -> int | None:
            """The longest sequence, in positions, the model can tell apart: a Transformer's learned
            positions (`max_positions`; a later position would reuse the last row); None where
            positions are computed (sinusoidal) or an RNN reads any length."""
            if self.family == "transformer" and self.positions == "learned":
                return self.max_positions
            return None


__all__ = ["DEFAULT_SCORE", "Family", "ModelConfig", "ScoreName"]
