"""The model's config, `model:` in a config file: one family's config, chosen by `family`.

Each family keeps its config in its own folder (heed.nn.rnn.config.RNNConfig,
heed.nn.transformer.config.TransformerConfig) and lists it in FAMILY_CONFIGS. `ModelConfig` is
their union, discriminated on `family`: `rnn` when it is missing (what every config and model
directory from before families meant). `ModelConfig(**fields)` validates fields into the family's
config, and `ModelConfig` as a type (a pydantic field, an annotation) is the union; a family
config is an instance of it. A field of another family is an error naming it. Plain pydantic, no
torch: reading a config loads no model code."""
from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Annotated, Any, Union

from pydantic import Discriminator, Tag, TypeAdapter
from pydantic_core import core_schema

from heed.nn.family_config import FamilyConfig
from heed.nn.rnn.config import DEFAULT_SCORE, RNNConfig, ScoreName
from heed.nn.transformer.config import TransformerConfig

# family -> its config class: a new family adds one line here (and one in heed.nn.build.FAMILIES).
FAMILY_CONFIGS: dict[str, type[FamilyConfig]] = {"rnn": RNNConfig, "transformer": TransformerConfig}
DEFAULT_FAMILY = "rnn"


def family_of(value: Any) -> str:
    """The family a `model:` mapping (or a family config) is of: its `family`, rnn when missing."""
    if isinstance(value, dict):
        family = value.get("family", DEFAULT_FAMILY)
        return family if isinstance(family, str) else repr(family)
    return getattr(value, "family", DEFAULT_FAMILY)


FamilyUnion = Annotated[Union[tuple(Annotated[cls, Tag(name)] for name, cls in FAMILY_CONFIGS.items())],  # type: ignore[misc]
                        Discriminator(family_of, custom_error_type="unknown_family",
                                      custom_error_message="unknown model family; choose "
                                                           + " or ".join(FAMILY_CONFIGS))]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(FamilyUnion)


def without_family_tag(loc: Sequence[str | int], at: int = 0) -> tuple[list[str | int], type[FamilyConfig] | None]:
    """A validation error's location as the user wrote the fields: pydantic puts the family the
    input was validated as at `at` ("rnn", "hidden_size"). Returns it without, and that family's class."""
    loc = list(loc)
    if len(loc) > at and loc[at] in FAMILY_CONFIGS:
        return loc[:at] + loc[at + 1:], FAMILY_CONFIGS[str(loc[at])]
    return loc, None


class ModelConfig(abc.ABC):
    """Architecture: the family, then its fields (see the module doc). `ModelConfig(**fields)`
    returns the family's config; every family config is a ModelConfig."""

    def __new__(cls, **fields: Any) -> Any:  # type: ignore[misc]
        return _ADAPTER.validate_python(fields)

    @classmethod
    def model_validate(cls, data: Any) -> Any:
        return _ADAPTER.validate_python(data)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        return handler(FamilyUnion)


for _config in FAMILY_CONFIGS.values():
    ModelConfig.register(_config)

__all__ = ["DEFAULT_FAMILY", "DEFAULT_SCORE", "FAMILY_CONFIGS", "FamilyConfig", "ModelConfig", "ScoreName",
           "family_of", "without_family_tag"]
