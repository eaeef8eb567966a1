"""The toy family's `model:` section: its one field. Everything else heed reads of a model's config
(`family`'s default aside: `copy`, `kind`, ...) is FamilyConfig's."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from heed.nn.family_config import FamilyConfig


class ToyConfig(FamilyConfig):
    """A bag of embeddings: the previous token's embedding asks the source embeddings, one attention."""

    family: Literal["toy"] = Field("toy", description="the model family")
    embed_size: int = Field(8, gt=0, description="the one embedding size")


def describe(cfg: ToyConfig) -> str:
    return f"toy, embeddings of {cfg.embed_size}"


def sizes(cfg: ToyConfig) -> str:
    return f"model.embed_size {cfg.embed_size}"
