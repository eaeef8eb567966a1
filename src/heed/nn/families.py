"""The registry of model families: one line per family, torch-free.

A line names the family's two halves by import path ("module:attribute"), and each is imported
only when it is needed:
- `config`: its `model:` class (a heed.nn.family_config.FamilyConfig), imported when a config is
  read (heed.nn.model_config validates `model:` through the classes registered at that moment);
- `family`: its Family (below: build, describe, sizes, graphs, ct2, converters, releases),
  imported when a model is built, exported or imported, never when a config is read.

A family of heed's is a folder under heed/nn plus its line in FAMILIES; a family from elsewhere (a
plug-in, a test) is one `register_family` call."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # annotations only: the registry loads no torch
    from heed.nn.protocol import FamilyGraphs, TrainableModel

V = TypeVar("V")


@dataclass(frozen=True)
class FamilyLine:
    """Where a family's halves live, each as "module:attribute" (see the module doc)."""

    config: str
    family: str


@dataclass(frozen=True)
class Family:
    """A model family's torch half, as the rest of heed meets it (its config class, torch-free, is
    the other half: both are named by the family's line in FAMILIES):
    - `build`: a config of the family -> a fresh TrainableModel;
    - `describe`: the model in a few words, for log lines (its attention, say);
    - `sizes`: the config fields that make it large, for a "too large" message;
    - `graphs`: its ONNX export contract for a config (FamilyGraphs, heed.export), or None when
      the family does not export (a research family, say);
    - `ct2`: its CTranslate2 converter (model, config, src_tokens=, tgt_tokens=, max_src_len=, unk_id=) ->
      a CTranslate2 spec, or None when CTranslate2 cannot run the family;
    - `converters`: pretrained checkpoints it holds, by Hugging Face `model_type` (heed.pretrained):
      (directory, config.json) -> heed.nn.transformer.convert.common.Converted, and by the kind of a
      native release (a directory without config.json), which `releases` recognises: kind ->
      (directory -> bool). Give them as a LazyMapping (below) of import paths, so building a
      model imports no converter."""

    build: Callable[..., TrainableModel]
    describe: Callable[..., str]
    sizes: Callable[..., str]
    graphs: Callable[..., FamilyGraphs] | None = None
    ct2: Callable[..., Any] | None = None  # -> a ctranslate2 spec (ctranslate2 ships no type information)
    converters: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    releases: Mapping[str, Callable[[Path], bool]] = field(default_factory=dict)


# model.family -> its line. A new family is a folder under heed/nn plus one line here.
FAMILIES: dict[str, FamilyLine] = {
    "rnn": FamilyLine(config="heed.nn.rnn.config:RNNConfig", family="heed.nn.rnn.family:FAMILY"),
    "transformer": FamilyLine(config="heed.nn.transformer.config:TransformerConfig",
                              family="heed.nn.transformer.family:FAMILY"),
}


def register_family(name: str, *, config: str, family: str) -> None:
    """Make family `name` known to config reading (`model.family: name`) and to building: `config`
    and `family` are the import paths ("module:attribute") of its FamilyConfig class and its
    Family. Registering a name again with the same paths does nothing; with others it
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


def family(name: str) -> Family:
    """Family `name`'s torch half; imports its model code."""
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
