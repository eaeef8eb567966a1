"""YAML that cannot hang heed and cannot silently lose a key.

Every YAML heed reads (config files, `--set` values, a model directory's `config.yaml`) goes through
`parse`. It is PyYAML's safe loader with three refusals:

- anchors and aliases (`&a`, `*a`): heed's configs never need them, and an alias "bomb" (nine
  levels of nine aliases each, "billion laughs") makes a 1 KB file expand to 10^9 nodes and hangs
  `yaml.safe_load`;
- a key written twice in one mapping: plain PyYAML keeps the last one without a word, so a setting
  the user can see in the file is silently ignored;
- nesting deeper than `MAX_DEPTH`: composing is recursive, so `[[[[...` a few thousand deep is a
  RecursionError traceback instead of a message.

A file is read whole, so callers cap its size first (`MAX_BYTES`); `read_capped` does that.
`parse(text, strings=True)` is the same loader building every scalar as a string (PyYAML's
BaseLoader), for files whose `yes`, `null` or `1` are text: a Marian vocabulary's pieces.
Errors are `YamlError` with the line and column; callers wrap them in the HeedError that names
their file (ConfigError, ModelDirError).
"""
from __future__ import annotations

import os
from typing import IO, TYPE_CHECKING, Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode

MAX_BYTES = 1 << 20  # 1 MiB: a heed config is a few KB; anything this big is the wrong file
MAX_DEPTH = 100  # heed's schema nests 4 deep; 100 leaves room for any list value


class YamlError(Exception):
    """Text that is not YAML heed will read. `str()` is "invalid YAML: line L, column C: problem"
    (1-based); `line`/`column` are None where PyYAML gave no position."""

    def __init__(self, problem: str, *, line: int | None = None, column: int | None = None) -> None:
        self.problem = problem
        self.line = line
        self.column = column
        where = f"line {line}, column {column}: " if line is not None else ""
        super().__init__(f"invalid YAML: {where}{problem}")


class TooLargeError(Exception):
    """A file over its limit (`MAX_BYTES` unless the caller gave another); `str()` says the limit."""

    def __init__(self, size: int | None, limit: int = MAX_BYTES) -> None:
        got = f"{size / (1 << 20):.1f} MiB" if size is not None else f"more than {limit >> 20} MiB"
        what = "a YAML config" if limit == MAX_BYTES else "this YAML file"
        super().__init__(f"too large for {what} ({got}; at most {limit >> 20} MiB); is this the right file?")


# the loader _Strict is mixed into, as a type checker sees it (at run time the mixin's base is object,
# and its super() calls reach the loader class it is combined with)
if TYPE_CHECKING:
    _Loader = yaml.SafeLoader
else:
    _Loader = object


class _Strict(_Loader):
    """The refusals of anchors/aliases, duplicate keys and deep nesting (see module doc), mixed
    into a PyYAML loader."""

    _depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            # Refused at the first sight, before any expansion: this is what defeats the alias bomb.
            raise ComposerError(None, None, "anchors and aliases (&name, *name) are not allowed in heed's YAML; "
                                "write the value out in full", event.start_mark)
        if self._depth >= MAX_DEPTH:
            raise ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<:` merges by design; the keys it brings may be overridden
            key = self.construct_object(key_node, deep=True)
            try:
                seen = first_line.get(key)
            except TypeError:
                continue  # unhashable key: SafeConstructor reports it below
            if seen is not None:
                written = key_node.value if isinstance(key_node, ScalarNode) else key
                raise ConstructorError(None, None, f"duplicate key '{written}' (first on line {seen}); "
                                       "keep one of the two", key_node.start_mark)
            first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as e:
            # PyYAML lets Python's own errors out: `2001-13-01` (a date with month 13), an integer
            # of 5000 digits (Python's int-from-text limit). They are the text's fault: say where.
            raise ConstructorError(None, None, f"cannot read this value: {str(e).split(';')[0]}",
                                   node.start_mark) from None


class _StrictLoader(_Strict, yaml.SafeLoader):
    """SafeLoader with the refusals."""


class _StrictStringLoader(_Strict, yaml.BaseLoader):
    """BaseLoader (every scalar a string) with the refusals."""


def parse(text: str, *, strings: bool = False) -> Any:
    """The YAML document in `text` (None for an empty one; with `strings`, every scalar a str).
    Raises YamlError."""
    try:
        return yaml.load(text, Loader=_StrictStringLoader if strings else _StrictLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        problem = e.problem or str(e).splitlines()[0]
        if mark is None:
            raise YamlError(problem) from None
        raise YamlError(problem, line=mark.line + 1, column=mark.column + 1) from None
    except yaml.YAMLError as e:  # e.g. a non-printable character in the text
        raise YamlError(str(e).splitlines()[0]) from None


def read_capped(f: IO[bytes], limit: int = MAX_BYTES) -> bytes:
    """All of `f`, or TooLargeError past `limit` bytes (read stops there, so /dev/zero cannot fill memory)."""
    data = f.read(limit + 1)
    if len(data) > limit:
        try:
            size: int | None = os.fstat(f.fileno()).st_size or None
        except (OSError, ValueError, AttributeError):
            size = None
        raise TooLargeError(size, limit)
    return data


class _PlainDumper(yaml.SafeDumper):
    """SafeDumper that never writes an anchor: `parse` refuses them, and a value that appears twice
    (the same list object) would otherwise be saved as `&id001` ... `*id001`."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(data: Any) -> str:
    """YAML text for plain data (dicts, lists, scalars), keys in insertion order, that `parse` reads back."""
    return yaml.dump(data, Dumper=_PlainDumper, sort_keys=False, allow_unicode=True)


__all__ = ["MAX_BYTES", "MAX_DEPTH", "TooLargeError", "YamlError", "dump", "parse", "read_capped"]
