"""`heed explain READING MODEL --src FILE [--tgt FILE] [the reading's options] [-o out.json]`: every
reading of heed.explain.readings as a command, made from its registry entry alone (its summary is
the help, its Options' fields the flags, as decode_flags makes the decode flags from DecodeConfig).
A reading registered later is a command too: the group reads the registry when it is asked."""
from __future__ import annotations

import enum
import inspect
import json
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import typer
import typer.core
import typer.main

from heed.cli.app import HeedCommand, flags_in_place, friendly_errors, language_options
from heed.cli.decode_flags import flag_type
from heed.cli.io import cut_long_texts, given_files, lines_named, read_sources, warn_long_sources
from heed.cli.progress import Progress, progress_option
from heed.plumbing.files import atomic_open

if TYPE_CHECKING:
    from heed.explain.readings import Reading

READING_PANEL = "Reading options"  # the heading a reading's own flags stand under in --help
CHUNK = 8  # sentences a call reads (and the progress bar counts) at once, as heed lens does


class ReadingsGroup(typer.core.TyperGroup):
    """`heed explain`: one command per registered reading, made when the group is asked for its
    commands (help, a run, the snapshot of every command's help)."""

    _made: ClassVar[dict[str, tuple[Any, Any]]] = {}  # name -> (the Reading, its command), made once per Reading

    @property  # type: ignore[override]
    def commands(self) -> dict[str, Any]:
        from heed.explain.readings import READINGS

        out = {}
        for name, reading in READINGS.items():
            made = self._made.get(name)
            if made is None or made[0] is not reading:
                made = self._made[name] = (reading, reading_command(reading))
            out[name] = made[1]
        return out

    @commands.setter
    def commands(self, value: Any) -> None:
        """Typer sets the commands it was given (none): the registry is the list."""


explain_app = typer.Typer(name="explain", cls=ReadingsGroup, no_args_is_help=True, add_completion=False,
                          subcommand_metavar="READING MODEL [ARGS]...",
                          rich_markup_mode=None,
                          help="Read a model while it reads given translations (or its own): each reading of "
                               "heed.explain.readings is a command, whose options are its own. The JSON (-o) holds, "
                               "per sentence pair, the reading's array with its axes named (layer, head, target, "
                               "source, ...), the tokens that label them, and its extras.")


def option_flags(reading: Reading) -> list[inspect.Parameter]:
    """Each field of the reading's Options as a flag (--field-name), its default the field's and its
    help the field's description."""
    flags = []
    for field, info in reading.options.model_fields.items():
        flag = "--" + field.replace("_", "-")
        kind = flag_type(info.annotation)
        if kind is bool:
            flag = f"{flag}/--no-{field.replace('_', '-')}"
        several = typing.get_origin(info.annotation) is tuple  # a tuple of values: the flag given once for each
        if several:
            item = flag_type(typing.get_args(info.annotation)[0])
            if typing.get_origin(item) is typing.Literal:  # typer takes a list of an Enum's, not of a Literal's
                item = _choices(field, typing.get_args(item))
            kind = list.__class_getitem__(item)  # list[item], made at run time
        bounds = {key: getattr(m, attr) for m in info.metadata for key, attr in (("min", "ge"), ("max", "le"))
                  if hasattr(m, attr)}
        words = info.description or field
        if several:
            words += "; the flag once for each" + (" source, in order" if field in reading.options.per_pair else "")
        default = (None if info.is_required() else list(info.default)) if several else info.default
        if several and typing.get_args(kind) == (str,):
            bounds["metavar"] = "TEXT"
        flags.append(inspect.Parameter(field, inspect.Parameter.KEYWORD_ONLY, annotation=kind,
                                       default=typer.Option(default, flag, rich_help_panel=READING_PANEL,
                                                            help=words[:1].upper() + words[1:] + ".", **bounds)))
    return flags


def _choices(name: str, values: tuple[str, ...]) -> Any:
    """A str Enum of `values`, which typer offers as a flag's choices (a list of Literal's it does not take)."""
    return enum.Enum(name, {value: value for value in values}, type=str)


def reading_command(reading: Reading) -> Any:
    """The click command of `heed explain NAME`."""

    @friendly_errors
    @language_options
    def command(
        model: Path = typer.Argument(..., help="Model directory (or a training output directory)."),
        src: Path = typer.Option(..., "--src", help="Source sentences, one per line."),
        tgt: Path | None = typer.Option(None, "--tgt", help="Translations to read, line-aligned with --src "
                                           "(default: the model's own translations)."),
        output: Path | None = typer.Option(None, "--output", "-o", help="Write the results as JSON here "
                                              "(default: stdout)."),
        device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
        progress: bool | None = progress_option(),
        *,
        options: dict[str, Any],
        languages: dict[str, Any],
    ) -> None:
        run_reading(reading.name, model, src, tgt, output, device, progress, options, languages)

    command.__doc__ = (f"{reading.summary[:1].upper() + reading.summary[1:]} (the reading {reading.name!r}; "
                       f"a model that is {reading.a_model()}).")
    generated = flags_in_place(command, "options", option_flags(reading), dict)
    one = typer.Typer(add_completion=False, rich_markup_mode=None)
    one.command(reading.name, cls=HeedCommand)(generated)
    return typer.main.get_command(one)


def run_reading(name: str, model: Path, src: Path, tgt: Path | None, output: Path | None, device: str,
                progress: bool | None, options: dict[str, Any], languages: dict[str, Any]) -> None:
    """Load the model, refuse it in one line if it is not what the reading needs, read the pairs
    CHUNK at a time, and write one JSON list: each pair's ReadingResult.to_dict()."""
    from heed.api import Translator
    from heed.explain.readings import check, check_per_pair, get

    given = {k: [getattr(x, "value", x) for x in v] if isinstance(v, list) else v for k, v in options.items()}
    parsed = get(name).parse({k: v for k, v in given.items() if v is not None})
    sources, targets = read_sources(src, tgt, empty="there is nothing to read")
    check_per_pair(parsed, len(sources))
    translator = Translator.load(model, device=device, **languages)
    check(name, translator.model)
    warn_long_sources(translator, sources, str(src))
    if targets is not None:
        targets = cut_long_texts(translator, targets, str(tgt))
    results = []
    with Progress("sentences read", total=len(sources), enabled=progress) as bar:
        for start in range(0, len(sources), CHUNK):
            chunk = sources[start:start + CHUNK]
            with lines_named(given_files(src, tgt), first=start + 1):
                results += translator.explain(name, chunk, None if targets is None else targets[start:start + CHUNK],
                                              **dict(parsed.for_pairs(slice(start, start + CHUNK))))
            bar.advance(len(chunk))
    text = json.dumps([r.to_dict() for r in results], ensure_ascii=False)
    if output is None:
        typer.echo(text)
        return
    with atomic_open(output) as sink:
        sink.write(text + "\n")
    shapes = sorted({"x".join(map(str, r.values.shape)) for r in results})
    typer.echo(f"{name}: {len(results)} sentence pairs, dims {', '.join(results[0].dims) if results else '-'} "
               f"(shapes {', '.join(shapes[:5])}{' ...' if len(shapes) > 5 else ''}): {output}")


__all__ = ["explain_app", "option_flags", "reading_command"]
