"""The toy family's `model:` section."""
from __future__ import annotations

import warnings
from typing import Literal

from pydantic import Field

from heed.nn.family_config import FamilyConfig

# `copy` (every family's config says whether it copies) hides pydantic's deprecated BaseModel.copy.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "copy" in "ToyConfig" shadows', category=UserWarning)

    class ToyConfig(FamilyConfig):
        """A bag of embeddings: the previous token's embedding asks the source embeddings, one attention."""

        family: Literal["toy"] = Field("toy", description="the model family")
        embed_size: int = Field(8, gt=0, description="the one embedding size")
        copy: bool = Field(False, description="no copy attention")


def describe(cfg: ToyConfig) -> str:
    return f"toy, embeddings of {cfg.embed_size}"


def sizes(cfg: ToyConfig) -> str:
    return f"model.embed_size {cfg.embed_size}"
