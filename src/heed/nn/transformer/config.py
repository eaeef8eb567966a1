"""The Transformer family's `model:` section: layers, width, heads, norms, positions, embeddings.
Plain pydantic, no torch; heed.nn.transformer.model.build_transformer makes the model from it."""
from __future__ import annotations

import warnings
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from heed.nn.family_config import FamilyConfig
from heed.plumbing.limits import MAX_LAYERS

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "copy" in "TransformerConfig" shadows',
                            category=UserWarning)

    class TransformerConfig(FamilyConfig):
        """The Transformer family (Vaswani et al. 2017): `layers` encoder and `layers` decoder layers of
        `d_model` with `heads` heads each."""

        family: Literal["transformer"] = Field("transformer", description="the model family: rnn or transformer")
        copy: bool = Field(False, description="not supported by the transformer family yet (the RNN's copy "
                                              "attention)")
        coverage: bool = Field(False, description="not supported by the transformer family yet (the RNN's "
                                                  "coverage attention)")
        coverage_loss: float = Field(0.0, ge=0.0, description="not supported by the transformer family yet")
        dropout: float = Field(0.2, ge=0.0, lt=1.0, description="dropout on embeddings and on every sublayer's "
                                                                 "output")
        layers: int = Field(6, ge=1, le=MAX_LAYERS, description="encoder layers, and as many decoder layers")
        d_model: int = Field(512, gt=0, description="the size of every layer's input and output")
        heads: int = Field(8, ge=1, description="attention heads per layer; d_model must be divisible by it")
        ff_size: int = Field(2048, gt=0, description="the feed-forward network's inner size")
        norm: Literal["pre", "post"] = Field(
            "pre", description="layer norm before each sublayer (pre: trains without a long warm-up) or after its "
                               "residual sum (post: Vaswani et al. 2017)")
        positions: Literal["sinusoidal", "learned"] = Field(
            "sinusoidal", description="sinusoidal positions (Vaswani et al. 2017, 3.5) or a learned vector per "
                                      "position")
        max_positions: int = Field(1024, ge=1, description="learned positions: the positions learned; later ones "
                                                           "read the last")
        tie_embeddings: bool = Field(True, description="the output layer reuses the target embedding (Press & Wolf "
                                                       "2017)")
        share_embeddings: bool = Field(False, description="the encoder reads the target embedding too, one table "
                                                          "for both sides (needs data.shared_vocab)")
        attention_dropout: float = Field(0.1, ge=0.0, lt=1.0, description="dropout on the attention weights")
        activation: Literal["relu", "gelu", "gelu_tanh", "swish"] = Field(
            "relu", description="the feed-forward network's nonlinearity: relu (Vaswani et al. 2017), gelu, gelu_tanh "
                                "(its tanh approximation) or swish (x sigmoid(x), OPUS-MT's)")
        scale_embeddings: bool = Field(True, description="token embeddings times sqrt(d_model) before the positions "
                                                         "are added (Vaswani et al. 2017, 3.4)")
        sinusoid_layout: Literal["interleaved", "halves", "fairseq"] = Field(
            "interleaved", description="sinusoidal positions: sin and cos interleaved (Vaswani et al. 2017), all "
                                       "sines then all cosines (halves: Marian's), or fairseq's (M2M-100's, NLLB's: "
                                       "halves with frequencies 10000^(-i/(d/2-1)), positions from 2)")

        alignment_layer: bool = Field(
            False, description="an extra attention layer that reads the whole target (no causal mask) and attends "
                               "over the source, trained by train.alignment's supervision and used only to align "
                               "(Garg et al. 2019's full-context alignment; heed align reads it by default); "
                               "translation never runs it")

        @field_validator("heads")
        @classmethod
        def _heads_divide_d_model(cls, value: int, info: ValidationInfo) -> int:
            d_model = info.data.get("d_model")
            if d_model is not None and d_model % value:
                raise ValueError(f"d_model {d_model} is not divisible by heads {value}: each head gets d_model / heads "
                                 f"dimensions; make d_model a multiple of heads (e.g. {value * max(1, round(d_model / value))})")
            return value

        @model_validator(mode="after")
        def _check(self) -> TransformerConfig:
            for field in ("copy", "coverage"):
                if getattr(self, field):
                    raise ValueError(f"'{field}' is not supported by the transformer family yet; remove "
                                     f"model.{field} or use family: rnn")
            if self.positions == "sinusoidal" and (self.d_model % 2 or self.d_model < 4):
                raise ValueError(f"sinusoidal positions need an even d_model of 4 or more, not {self.d_model}")
            return self

        def data_problem(self, data: Any) -> tuple[str, str] | None:
            if self.share_embeddings and not data.shared_vocab:
                return ("model.share_embeddings", ("one embedding table for both sides needs one vocabulary for both; "
                        "set data.shared_vocab: true, or model.share_embeddings: false"))
            return None

        @property
        def kind(self) -> str:
            """What the model is, in words a log line or a page shows."""
            return "transformer"

        @property
        def score(self) -> None:
            return None

        @property
        def attention_grid(self) -> tuple[int, int]:
            return self.layers, self.heads

        @property
        def has_alignment_layer(self) -> bool:
            return self.alignment_layer

        @property
        def position_limit(self) -> int | None:
            """Learned positions: `max_positions` (a later position would reuse the last row); None for
            sinusoidal ones, computed for any position."""
            return self.max_positions if self.positions == "learned" else None


def describe(cfg: TransformerConfig) -> str:
    return f"transformer, {cfg.layers} layers of {cfg.heads} heads"


def sizes(cfg: TransformerConfig) -> str:
    return f"model.d_model {cfg.d_model}, model.ff_size {cfg.ff_size}, model.layers {cfg.layers}"
