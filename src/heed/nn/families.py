"""The registry of model families: one line per family, torch-free.

A line names the family's two halves by import path ("module:attribute"), and each is imported
only when it is needed:
- `config`: its `model:` class (a heed.nn.family_config.FamilyConfig), imported when a config is
  read (heed.nn.model_config validates `model:` through the classes registered at that moment);
- `family`: its heed.nn.build.Family (build, describe, sizes, graphs, ct2, converters, releases),
  imported when a model is built, exported or imported, never when a config is read.

A family of heed's is a folder under heed/nn plus its line in FAMILIES; a family from elsewhere (a
plug-in, a test) is one `register_family` call."""
from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from heed.nn.build import Family
    from heed.nn.family_config import FamilyConfig

V = TypeVar("V")


@dataclass(frozen=True)
class FamilyLine:
    """Where a family's halves live, each as "module:attribute" (see the module doc)."""

    config: str
    family: str


# model.family -> its line. A new family is a folder under heed/nn plus one line here.
FAMILIES: dict[str, FamilyLine] = {
    "rnn": FamilyLine(config="heed.nn.rnn.config:RNNConfig", family="heed.nn.rnn.family:FAMILY"),
    "transformer": FamilyLine(config="heed.nn.transformer.config:TransformerConfig",
                              family="heed.nn.transformer.family:FAMILY"),
}


def register_family(name: str, *, config: str, family: str) -> None:
    """Make family `name` known to config reading (`model.family: name`) and to building: `config`
    and `family` are the import paths ("module:attribute") of its FamilyConfig class and its
    heed.nn.build.Family. Registering a name again with the same paths does nothing; with others it
    is an error (one name, one family)."""
    line = FamilyLine(config=config, family=family)
    for path in (config, family):
        module, _, attribute = path.partition(":")
        if not module or not attribute:
            raise ValueError(f"{path!r} is not an import path 'module:attribute'")
    if FAMILIES.get(name, line) != line:
        raise ValueError(f"model family {name!r} is registered already, as {FAMILIES[name]}")
    FAMILIES[name] = line


def unregister_family(name: str) -> None:
    """Forget family `name` (a test's or a plug-in's): configs of it are refused again."""
    FAMILIES.pop(name, None)


def load(path: str) -> Any:
    """The object an import path "module:attribute" names."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def config_class(name: str) -> type[FamilyConfig]:
    """Family `name`'s `model:` class (torch-free); KeyError for a family not registered."""
    return load(FAMILIES[name].config)


def config_classes() -> dict[str, type[FamilyConfig]]:
    """Every registered family's `model:` class, in registry order."""
    return {name: config_class(name) for name in FAMILIES}


def family(name: str) -> Family:
    """Family `name`'s torch half (heed.nn.build.Family); imports its model code."""
    return load(FAMILIES[name].family)


def families() -> dict[str, Family]:
    """Every registered family's torch half, in registry order."""
    return {name: family(name) for name in FAMILIES}


class LazyMapping(Mapping[str, V]):
    """A mapping of names to import paths, each imported on first read: a family's converters are
    registered this way, so building a model loads none of the importers."""

    def __init__(self, paths: Mapping[str, str]) -> None:
        self._paths = dict(paths)

    def __getitem__(self, key: str) -> V:
        return load(self._paths[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def __repr__(self) -> str:
        return f"LazyMapping({self._paths!r})"
