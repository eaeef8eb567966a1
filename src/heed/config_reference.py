"""The configuration reference: every field of a heed config with its type, default, limits and
description, generated from the pydantic models (heed.config.Config), so it cannot drift from what
heed accepts. `heed config` prints it; docs/config.md is this text (a test keeps the two equal).
"""
from __future__ import annotations

import enum
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from heed.config import Config
from heed.nn.family_config import config_classes
from heed.nn.model_config import ModelConfig


@dataclass(frozen=True)
class FieldDoc:
    """One leaf of the config: `name` dotted (train.epochs); `section` the table it is listed in
    (its dotted parent, or "model (family: rnn)" for a family's fields)."""

    name: str
    type: str
    default: str
    limits: str
    description: str
    section: str = ""


def _sections_of(annotation: Any, dotted: str) -> list[tuple[str, type[BaseModel]]]:
    """The sections a field opens: [(title, class)]; `model:` opens one per family."""
    if annotation is ModelConfig:
        return [(f"{dotted} (family: {name})", cls) for name, cls in config_classes().items()]
    inner = _model_of(annotation)
    return [] if inner is None else [(dotted, inner)]


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel inside `annotation` (X, X | None), or None."""
    candidates = typing.get_args(annotation) if _is_union(annotation) else (annotation,)
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def type_name(annotation: Any) -> str:
    """A field's type as a config author writes it: `int`, `float or null`, `"a" | "b"`, `[float, float]`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if _is_union(annotation):
        parts = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    if origin is typing.Literal:
        return " | ".join(f'"{a}"' if isinstance(a, str) else str(a) for a in args)
    if origin in (list, list):
        return f"list of {type_name(args[0])}"
    if origin is tuple:
        return "[" + ", ".join(type_name(a) for a in args) + "]"
    if annotation is Path:
        return "path"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " | ".join(f'"{m.value}"' for m in annotation)
    return getattr(annotation, "__name__", str(annotation))


def _default(info: FieldInfo) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return "required"
    value = info.default_factory() if info.default_factory is not None else info.default  # type: ignore[call-arg]
    if isinstance(value, BaseModel):
        return "(section)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(map(str, value)) + "]"
    if isinstance(value, Path):
        return str(value)
    return str(value)


def _limits(info: FieldInfo) -> str:
    """">= 1", "> 0, < 1", "<= 256" from the field's metadata (and those of a tuple's items)."""
    parts = []
    for meta in info.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("min_length", "length >=")):
            value = getattr(meta, attr, None)
            if value is not None:
                parts.append(f"{sign} {value}")
    args = typing.get_args(info.annotation)
    if typing.get_origin(info.annotation) is tuple and args:
        inner = [FieldInfo.from_annotation(a) for a in args]
        each = {_limits(i) for i in inner}
        if len(each) == 1 and next(iter(each)):
            parts.append(f"each {next(iter(each))}")
    return ", ".join(parts)


def fields(model: type[BaseModel] = Config, prefix: str = "",
           section: str = "") -> Iterator[FieldDoc | tuple[str, str]]:
    """The config's fields, a section's own leaves (FieldDoc, in declaration order) before its
    subsections; each subsection as (its title, its doc), then its fields."""
    subsections = []
    for name, info in model.model_fields.items():
        opened = _sections_of(info.annotation, f"{prefix}{name}")
        if not opened:
            yield FieldDoc(f"{prefix}{name}", type_name(info.annotation), _default(info), _limits(info),
                           info.description or "", section)
        subsections += [(f"{prefix}{name}", title, info, inner) for title, inner in opened]
    for dotted, title, info, inner in subsections:
        head = " ".join((inner.__doc__ or "").strip().split("\n\n")[0].split())
        yield title, head or (info.description or "")
        yield from fields(inner, dotted + ".", title)


def reference() -> str:
    """The reference as Markdown: a table of fields per section."""
    out = ["# Configuration reference", "",
           ("Every field of a heed config (`heed train CONFIG`, `--set FIELD=VALUE`), generated from the "
           "validated models in `heed.config` by `heed config` (tests/config/test_config_reference.py keeps this "
           "file equal to it). A field not listed is an error naming it; numbers are finite."), ""]
    docs = {name: doc for name, doc in (i for i in fields() if isinstance(i, tuple))}
    current: str | None = None  # the section whose table is open
    for item in fields():
        if isinstance(item, tuple):
            continue
        section = item.section
        if section != current:  # a section's own fields, or the top level's after the sections
            title = f"`{section}`" if section else "the top level"
            doc = docs.get(section, "")
            out += ["", f"## {title}", ""] + ([doc, ""] if doc else [])
            out += ["| field | type | default | limits | description |", "|---|---|---|---|---|"]
            current = section
        cells = [f"`{item.name}`", item.type, f"`{item.default}`", item.limits, item.description]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out).replace("\n\n\n", "\n\n") + "\n"


__all__ = ["FieldDoc", "fields", "reference", "type_name"]
