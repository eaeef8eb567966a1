"""What the commands read and show: input lines in chunks, warnings for sources cut to the model's
length, figure paths checked before the work, tables, and the names models are shown under."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from rich.console import Console

from heed.cli.progress import Progress
from heed.errors import HeedError

if TYPE_CHECKING:
    from rich.table import Table

    from heed.api import Translator


def read_lines(stream: Any, name: str) -> Iterator[str]:
    """Decoded lines (without their ends) of a binary stream, by the corpus readers' rules: lines end
    at \\n, \\r\\n or \\r; invalid UTF-8, control characters and lines over 1 MiB are DataErrors naming
    the line."""
    from heed.data.corpus import decode_line, physical_lines

    for number, raw in enumerate(physical_lines(stream, name), start=1):
        yield decode_line(raw, name, number)


def chunks(lines: Iterator[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def read_sources(src: Path, tgt: Optional[Path], *, empty: str) -> tuple[list[str], Optional[list[str]]]:
    """--src's sentences and, with --tgt, their line-aligned translations (the corpus reader's checks);
    a HeedError naming the line of an empty source (`empty` says why that matters)."""
    from heed.plumbing.files import open_stream

    if tgt is None:
        with open_stream(src) as stream:
            sources, targets = list(read_lines(stream, str(src))), None
    else:
        from heed.data.corpus import read_parallel

        pairs = list(read_parallel(src, tgt, streams=True))
        sources, targets = [p.src for p in pairs], [p.tgt for p in pairs]
    for number, line in enumerate(sources, start=1):
        if not line.strip():
            raise HeedError(f"{src}: line {number} is empty: {empty}")
    return sources, targets


def warn_long_sources(translator: "Translator", sources: Sequence[str], name: str) -> None:
    """translate's warning, for commands that read all their sources at once (attribute,
    faithfulness): the lines of `name` longer than the model's max_src_len, which are cut to it."""
    limit = translator.max_src_len
    cut = [number for number, text in enumerate(sources, start=1) if len(translator.codec.src_tokens(text)) > limit]
    if cut:
        Progress("", enabled=False).warn(truncation_message(cut, name, limit))


def truncation_message(lines: Sequence[int], name: str, limit: int, shown: int = 10) -> str:
    listed = ", ".join(map(str, lines[:shown])) + (f" and {len(lines) - shown} more" if len(lines) > shown else "")
    return (f"{name}: line{'s' * (len(lines) > 1)} {listed} {'are' if len(lines) > 1 else 'is'} longer than the "
            f"model's max_src_len ({limit} tokens); only the first {limit} tokens were translated (split long "
            "sentences)")


def check_figure_path(path: Optional[Path]) -> None:
    """A wrong figure suffix is a user error before any translating, not after."""
    from heed.viz import figure_format

    if path is not None:
        figure_format(path)


def print_table(table: "Table") -> None:
    Console(highlight=False, soft_wrap=False).print(table)


def model_names(models: Sequence[Path], names: Optional[str]) -> list[str]:
    """--names split at commas, or each model's directory name (its parent's for a `model/`
    inside a training output directory); the paths as given where those repeat."""
    if names is not None:
        given = [n.strip() for n in names.split(",")]
        if len(given) != len(models) or not all(given):
            raise HeedError(f"--names has {len(given)} name{'s' * (len(given) != 1)} for {len(models)} models; "
                            "give one non-empty name per model, comma-separated")
        if len(set(given)) != len(given):
            raise HeedError(f"--names repeats a name ({names}); give each model its own")
        return given

    def short(path: Path) -> str:
        path = path.absolute()
        return path.parent.name if path.name == "model" and path.parent.name else path.name

    derived = [short(p) for p in models]
    return derived if len(set(derived)) == len(derived) else [str(p) for p in models]
