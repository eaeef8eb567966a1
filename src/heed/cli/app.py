"""The `heed` app: its root options, and how every user mistake becomes a line or two on stderr
(exit 2, no traceback); `main` is the console script."""
from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer
import typer.core
from rich.console import Console

from heed.errors import HeedError
from heed.version import __version__

app = typer.Typer(
    name="heed",
    help="Sequence-to-sequence translation with attention: train, translate, evaluate, look inside.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


F = TypeVar("F", bound=Callable[..., Any])


OPTIONS_PANEL = "Options"


class HeedCommand(typer.core.TyperCommand):
    """Every heed command's click class (cli/__init__.py gives it to each): a usage line that reads
    like `heed translate MODEL... [OPTIONS]` (typer's own writes `[OPTIONS] {MODEL...}...`), and the
    options in sections by their rich_help_panel, the command's own first under "Options" and a
    group such as the decode flags under its heading after (typer's plain help, rich_markup_mode
    None, puts every option in one list)."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = []
        for param in self.get_params(ctx):
            if param.param_type_name != "argument":  # typer's TyperArgument is no click.Argument
                continue
            name = (param.metavar or param.name or "").upper()
            if param.nargs != 1 and not name.endswith("..."):
                name += "..."
            pieces.append(name if param.required else f"[{name}]")
        return [*pieces, *([self.options_metavar] if self.options_metavar else [])]

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments: list[tuple[str, str]] = []
        panels: dict[str, list[tuple[str, str]]] = {OPTIONS_PANEL: []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append(record)
            else:
                panels.setdefault(getattr(param, "rich_help_panel", None) or OPTIONS_PANEL, []).append(record)
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        for heading, records in panels.items():
            if records:
                with formatter.section(heading):
                    formatter.write_dl(records)


USER_ERROR = 2


INTERRUPTED = 130


BROKEN_PIPE = 141


ENSEMBLE_HELP = ("Model directory (or a training output directory, or a `heed export` directory); several "
                 "make an ensemble that decodes with the mean of their log-probabilities (they must share "
                 "tokenizers and vocabularies).")


THREADS_HELP = "torch CPU threads (default: torch's choice, usually one per core)."


def stderr() -> Console:
    # soft_wrap: rich wraps at 80 columns when stderr is not a terminal, which split log lines
    # ("eta \n23m45s") and hints into pieces no grep or paste could use. A terminal wraps by itself.
    return Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str) -> typer.Exit:
    stderr().print(f"[bold red]error:[/] {message}", markup=True, soft_wrap=True)
    return typer.Exit(USER_ERROR)


def friendly_errors(command: F) -> F:
    """User errors -> one or two lines on stderr and exit code 2, never a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except HeedError as e:
            raise fail(escape(str(e))) from None
        except BrokenPipeError:
            # The reader went away (`heed translate ... | head`): not a mistake, so no message. Point
            # stdout at /dev/null so the interpreter's final flush cannot fail again, and exit as a
            # process that SIGPIPE ended would (128 + 13), like `yes | head`.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(BROKEN_PIPE) from None
        except OSError as e:  # a file we were told to read or write
            where = f"{e.filename}: " if e.filename else ""
            raise fail(escape(f"{where}{e.strerror or e}")) from None

    return wrapper  # type: ignore[return-value]


def flags_in_place(command: F, name: str, flags: list[inspect.Parameter],
                   gather: Callable[[dict[str, Any]], Any]) -> F:
    """`command` with its parameter `name` replaced, where it stands, by the options `flags` (typer
    reads a command's options from its signature); the command is called with `name` set to
    `gather({flag's parameter name: value})`. The decode flags and the server's limits come so."""
    signature = inspect.signature(command, eval_str=True)

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {flag.name: kwargs.pop(flag.name) for flag in flags}
        return command(*args, **{name: gather(values)}, **kwargs)

    params = [new for own, param in signature.parameters.items() for new in (flags if own == name else [param])]
    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper  # type: ignore[return-value]


def language_options(command: F) -> F:
    """Give `command` --src-lang and --tgt-lang, a many-language model's pair; the command takes a
    keyword-only `languages`: {"src_lang": ..., "tgt_lang": ...}, as Translator.load takes them."""
    flags = [inspect.Parameter(field, inspect.Parameter.KEYWORD_ONLY, annotation=str | None,
                               default=typer.Option(None, flag, show_default=False, help=(
                                   f"A many-language model's {side} language: an imported M2M-100 or NLLB model's "
                                   f"code (fr, fra_Latn). Default: the model's data.{field}.")))
             for field, flag, side in (("src_lang", "--src-lang", "source"), ("tgt_lang", "--tgt-lang", "target"))]
    return flags_in_place(command, "languages", flags, dict)


def with_pair(translator: Any, languages: dict[str, Any]) -> Any:
    """`translator` with the pair `languages` (language_options') where it is a many-language model,
    as it is: one of several compared or served, or a model read beside another, that has none."""
    return translator.with_languages(**languages) if translator.languages else translator


def escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _version(value: bool) -> None:
    if value:
        import torch

        typer.echo(f"heed {__version__} (torch {torch.__version__}, python {sys.version.split()[0]})")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print heed's version and exit."),
    no_verify: bool = typer.Option(False, "--no-verify", help="Load model directories and exports without "
                                   "checking their files' sha256 (for models too large to hash at every load); "
                                   "non-finite weights are refused all the same."),
) -> None:
    """Sequence-to-sequence translation with attention."""
    from heed.plumbing.files import set_verify_default

    set_verify_default(False if no_verify else None)


def main() -> None:
    """Console-script entry point (`heed`, `python -m heed`)."""
    try:
        app()
    except KeyboardInterrupt:
        stderr().print("[yellow]interrupted[/]")
        sys.exit(INTERRUPTED)
