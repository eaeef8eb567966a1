"""What every family's config shares: strict fields (as heed.config's sections), and a field of
another family refused in words that name it and its family, rather than pydantic's "extra
inputs are not permitted". It declares every field and property the rest of heed reads of a
model's config (`family`, `copy`, `kind`, ...), each with a default a family may override. Plain
pydantic, no torch."""
from __future__ import annotations

import warnings
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from heed.nn import families

# `model.copy` is the name users write; it hides pydantic's deprecated BaseModel.copy (use
# model_copy), which pydantic warns about when the class is created: only that warning is silenced.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "copy" in "FamilyConfig" shadows', category=UserWarning)

    class FamilyConfig(BaseModel):
        """The base of nn/<family>/config.py's classes: each declares `family` as a Literal of its name
        (its default), and heed.nn.families names them."""

        model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

        family: str = Field(description="the model family")
        copy: bool = Field(  # type: ignore[assignment]  # the field BaseModel.copy's name: see above
            False, description="copy attention: source tokens copied to the output (a family without it leaves this "
                               "false)")

        @model_validator(mode="before")
        @classmethod
        def _fields_of_another_family(cls, data: Any) -> Any:
            if not isinstance(data, dict):
                return data
            mine = cls.model_fields["family"].default
            owners: dict[str, str] = {}  # field -> the first family in the registry that has it
            for name, other in config_classes().items():
                for field in other.model_fields:
                    if name != mine and field not in cls.model_fields:
                        owners.setdefault(field, name)
            foreign = sorted(field for field in data if field in owners)
            if foreign:
                owner = owners[foreign[0]]
                names = ", ".join(f"'{f}'" for f in foreign)
                raise ValueError(f"{names} {'is a field' if len(foreign) == 1 else 'are fields'} of family {owner}, "
                                 f"not {mine}; remove {'it' if len(foreign) == 1 else 'them'}"
                                 + f" or set model.family: {owner}")
            return data

        @classmethod
        def complete(cls, model: dict[str, Any], data: Any) -> dict[str, Any]:
            """`model:` as written, completed from the `data:` section (a dict or a DataConfig) where the
            family needs it, before validation. By default, as it is."""
            return model

        def data_problem(self, data: Any) -> tuple[str, str] | None:
            """(field, why) when this model cannot train on `data` (a DataConfig), else None."""
            return None

        @property
        def kind(self) -> str:
            """What the model is, in words a log line or a page shows (heed serve's `attention`): by
            default its family's name."""
            return self.family

        @property
        def position_limit(self) -> int | None:
            """The longest sequence, in positions, the model can tell apart; None when it reads any length."""
            return None

        @property
        def attention_grid(self) -> tuple[int, int] | None:
            """(decoder layers with attention over the source, heads per layer) of the model this config
            builds, as heed.nn.protocol.HeadsModel.head_grid gives them; None when its heads cannot be
            read or trained one by one (guided alignment training needs them)."""
            return None

        @property
        def has_alignment_layer(self) -> bool:
            """Whether the model this config builds has an alignment layer (heed.nn.protocol.AlignmentLayerModel),
            which guided alignment training trains instead of a decoder layer's heads."""
            return False


def config_class(name: str) -> type[FamilyConfig]:
    """Family `name`'s `model:` class (torch-free); KeyError for a family not registered."""
    return families.load(families.FAMILIES[name].config)


def config_classes() -> dict[str, type[FamilyConfig]]:
    """Every registered family's `model:` class, in registry order."""
    return {name: config_class(name) for name in families.FAMILIES}
