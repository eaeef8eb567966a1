"""What the commands read and show: input lines in chunks, warnings for sources cut to the model's
length, figure paths checked before the work, tables, and the names models are shown under."""
from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

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


def read_sources(src: Path, tgt: Path | None, *, empty: str) -> tuple[list[str], list[str] | None]:
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


def warn_long_sources(translator: Translator, sources: Sequence[str], name: str) -> None:
    """translate's warning, for commands that read all their sources at once (attribute,
    faithfulness): the lines of `name` longer than the model's max_src_len, which are cut to it."""
    limit = translator.max_src_len
    cut = [number for number, text in enumerate(sources, start=1) if len(translator.codec.src_tokens(text)) > limit]
    if cut:
        Progress("", enabled=False).warn(truncation_message(cut, name, limit))


def truncation_message(lines: Sequence[int], name: str, limit: int, shown: int = 10) -> str:
    return (f"{name}: {lines_are(lines, shown)} longer than the model's max_src_len ({limit} tokens); only the "
            f"first {limit} tokens were translated (split long sentences)")


def lines_are(lines: Sequence[int], shown: int = 10) -> str:
    """"line 3 is" or "lines 3, 7 and 12 more are": the first `shown` line numbers, for a message."""
    listed = ", ".join(map(str, lines[:shown])) + (f" and {len(lines) - shown} more" if len(lines) > shown else "")
    return f"line{'s' * (len(lines) > 1)} {listed} {'are' if len(lines) > 1 else 'is'}"


def max_tgt_len(translator: Translator) -> int:
    """The longest given target, in tokens, the commands read, as Translator.max_src_len bounds a
    source: the model's `data.max_tgt_len` (longer training pairs were dropped), or fewer where a
    Transformer learned fewer positions (`model.max_positions`, one for the <s> the decoder reads)."""
    limit = translator.config.model.position_limit
    return translator.config.data.max_tgt_len if limit is None else min(translator.config.data.max_tgt_len, limit - 1)


def cut_long_texts(translator: Translator, texts: Sequence[str], name: str, *,
                   side: Literal["src", "tgt"] = "tgt") -> list[str]:
    """The rule for given texts, one place for every command that reads them (align's --src and
    --tgt, attribute's --tgt and --contrast-file, lens's --tgt, attention's --tgt), as translate
    cuts a long source: a text longer than the model's max_src_len (side "src") or max_tgt_len
    (side "tgt") tokens is cut to the words that fit (the characters that fit, inside a first word
    too long alone), with one warning naming the lines of the file `name` (or the option `name`,
    "--tgt", of one text). A teacher-forced pass costs memory in tgt_len * src_len and tgt_len ** 2:
    a 900 KB target asked torch for terabytes."""
    if side == "src":
        limit, tokens = translator.max_src_len, translator.codec.src_tokens
    else:
        limit, tokens = max_tgt_len(translator), translator.codec.tgt_tokens

    def fits(text: str) -> bool:
        return len(tokens(text)) <= limit

    out, cut = list(texts), []
    for k, text in enumerate(texts):
        if fits(text):
            continue
        words = text.split()
        if not words:  # no words, yet too many tokens: nothing a word boundary can keep
            out[k] = ""
            cut.append(k + 1)
            continue
        n = _longest(len(words), _prefix_fits(words, " ", fits))
        out[k] = " ".join(words[:n]) if n else words[0][: _longest(len(words[0]), _prefix_fits(words[0], "", fits))]
        cut.append(k + 1)
    if cut:
        field = "max_src_len" if side == "src" else "max_tgt_len"
        where = f"{name} is" if name.startswith("--") else f"{name}: {lines_are(cut)}"
        Progress("", enabled=False).warn(
            f"{where} longer than the model's {field} ({limit} tokens); only what fits in {limit} tokens (whole "
            "words where one fits) was read (split long sentences)")
    return out


def _prefix_fits(parts: Sequence[str], joiner: str, fits: Callable[[str], bool]) -> Callable[[int], bool]:
    """Whether the first n of `parts` (words, or a word's characters) joined by `joiner` fit."""
    return lambda n: fits(joiner.join(parts[:n]))


def _longest(most: int, fits: Callable[[int], bool]) -> int:
    """The largest n in 0..most with fits(n) (fits(0) holds and fits is monotone), by doubling then
    halving: a few tokenizations of short prefixes, not one of every prefix of a megabyte."""
    low, high = 0, 1
    while high < most and fits(high):
        low, high = high, high * 2
    high = min(high, most)
    if fits(high):
        return high
    while high - low > 1:  # fits(low), not fits(high)
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def given_files(src: Path, tgt: Path | None) -> dict[str, str]:
    """lines_named's files for a command's --src and --tgt: the library's src_texts and tgt_texts."""
    return {"src_texts": str(src), **({"tgt_texts": str(tgt)} if tgt is not None else {})}


@contextlib.contextmanager
def lines_named(files: Mapping[str, str], first: int = 1) -> Iterator[None]:
    """Within, a HeedError naming a list's item the library's way (`tgt_texts[3]`: the 4th text of
    the list passed) names the file's line instead (`b.tgt: line 4`); `files` maps the list's name
    to the file's, `first` is the line of the list's item 0."""
    try:
        yield
    except HeedError as e:
        pattern = re.compile(r"\b(" + "|".join(map(re.escape, files)) + r")\[(\d+)\]")
        text = pattern.sub(lambda m: f"{files[m.group(1)]}: line {first + int(m.group(2))}", str(e))
        if text == str(e):
            raise
        raise HeedError(text) from None


def check_figure_path(path: Path | None) -> None:
    """A wrong figure suffix is a user error before any translating, not after."""
    from heed.viz import figure_format

    if path is not None:
        figure_format(path)


def print_table(table: Table) -> None:
    Console(highlight=False, soft_wrap=False).print(table)


def model_names(models: Sequence[Path], names: str | None) -> list[str]:
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
