"""The model's config, `model:` in a config file: one family's config, chosen by `family`.

Each family keeps its config in its own folder (heed.nn.rnn.config.RNNConfig,
heed.nn.transformer.config.TransformerConfig) and the registry (heed.nn.families) names it.
`ModelConfig` is their union, discriminated on `family`: `rnn` when it is missing (what every config
and model directory from before families meant). The union is made from the families registered
when a config is read, so a family registered later (heed.nn.families.register_family) is read as
any other. `ModelConfig(**fields)` validates fields into the family's config, and `ModelConfig` as
a type (a pydantic field, an annotation) is the union; a family config is an instance of it. A
field of another family is an error naming it. Plain pydantic, no torch: reading a config loads no
model code."""
from __future__ import annotations

import abc
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import Discriminator, Tag, TypeAdapter
from pydantic_core import core_schema

from heed.nn import families
from heed.nn.families import FamilyLine
from heed.nn.family_config import FamilyConfig, config_class

DEFAULT_FAMILY = "rnn"


def family_of(value: Any) -> str:
    """The family a `model:` mapping (or a family config) is of: its `family`, rnn when missing."""
    if isinstance(value, dict):
        family = value.get("family", DEFAULT_FAMILY)
        return family if isinstance(family, str) else repr(family)
    return getattr(value, "family", DEFAULT_FAMILY)


@functools.lru_cache(maxsize=8)
def _adapter(lines: tuple[tuple[str, FamilyLine], ...]) -> TypeAdapter[Any]:
    """The union of these families' configs, tagged by family name (pydantic puts the tag in an
    error's location: without_family_tag takes it out)."""
    choices = tuple(Annotated[families.load(line.config), Tag(name)] for name, line in lines)
    # Union[choices] of a tuple made at run time: `|` has no spelling for a tuple of any length
    union = Annotated[Union[choices],  # type: ignore[valid-type]  # noqa: UP007
                      Discriminator(family_of, custom_error_type="unknown_family",
                                    custom_error_message="unknown model family; choose "
                                                         + " or ".join(name for name, _ in lines))]
    return TypeAdapter(union)


def validate_model(data: Any) -> FamilyConfig:
    """`data` (a `model:` mapping or a family config) as its family's config, among the families
    registered now; a pydantic ValidationError otherwise."""
    return _adapter(tuple(families.FAMILIES.items())).validate_python(data)


def without_family_tag(loc: Sequence[str | int], at: int = 0) -> tuple[list[str | int], type[FamilyConfig] | None]:
    """A validation error's location as the user wrote the fields: pydantic puts the family the
    input was validated as at `at` ("rnn", "hidden_size"). Returns it without, and that family's class."""
    loc = list(loc)
    if len(loc) > at and loc[at] in families.FAMILIES:
        return loc[:at] + loc[at + 1:], config_class(str(loc[at]))
    return loc, None


if TYPE_CHECKING:
    # what a type checker sees: every family config is a FamilyConfig, which declares everything heed
    # reads of a model's config outside the family's folder; inside it, a family narrows to its class
    ModelConfig = FamilyConfig
else:
    class ModelConfig(abc.ABC):
        """Architecture: the family, then its fields (see the module doc). `ModelConfig(**fields)`
        returns the family's config; every family config is a ModelConfig."""

        def __new__(cls, **fields: Any) -> Any:  # type: ignore[misc]
            return validate_model(fields)

        @classmethod
        def model_validate(cls, data: Any) -> Any:
            return validate_model(data)

        @classmethod
        def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
            # Validated at call time, through the registry as it is then: a schema built into a model
            # class (heed.config.Config) would know only the families of the moment it was built.
            return core_schema.no_info_plain_validator_function(validate_model)

    ModelConfig.register(FamilyConfig)


__all__ = ["DEFAULT_FAMILY", "FamilyConfig", "ModelConfig", "family_of", "validate_model", "without_family_tag"]
