"""The `heed` command: a thin layer over heed.train, heed.api, heed.evaluate and heed.demo.

Every user mistake (a HeedError, an unreadable file) is printed in a line or two on stderr, naming
the file/line/field and what to do, with exit code 2 and no traceback.
"""
from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, List, Optional, TextIO, TypeVar

import typer
from rich.console import Console

import heed
from heed.errors import DataError, HeedError

app = typer.Typer(
    name="heed",
    help="Sequence-to-sequence translation with attention: train, translate, evaluate, look inside.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

F = TypeVar("F", bound=Callable[..., Any])
USER_ERROR = 2
INTERRUPTED = 130


def _stderr() -> Console:
    return Console(stderr=True, highlight=False)


def _fail(message: str) -> typer.Exit:
    _stderr().print(f"[bold red]error:[/] {message}", markup=True, soft_wrap=True)
    return typer.Exit(USER_ERROR)


def friendly_errors(command: F) -> F:
    """User errors -> one or two lines on stderr and exit code 2, never a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except HeedError as e:
            raise _fail(_escape(str(e))) from None
        except OSError as e:  # a file we were told to read or write
            where = f"{e.filename}: " if e.filename else ""
            raise _fail(_escape(f"{where}{e.strerror or e}")) from None

    return wrapper  # type: ignore[return-value]


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _version(value: bool) -> None:
    if value:
        import torch

        typer.echo(f"heed {heed.__version__} (torch {torch.__version__}, python {sys.version.split()[0]})")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print heed's version and exit."),
) -> None:
    """Sequence-to-sequence translation with attention."""


# ------------------------------------------------------------------------------------- train


@app.command()
@friendly_errors
def train(
    config: Path = typer.Argument(..., help="YAML config (see configs/*.yaml)."),
    set_: List[str] = typer.Option([], "--set", metavar="FIELD=VALUE",
                                   help="Override a config field, e.g. --set model.hidden_size=256 (repeatable)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in the output directory exactly."),
    output_dir: Optional[Path] = typer.Option(None, "--output-dir", help="Where to write (overrides output_dir)."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress",
                                            help="Progress bar (default: on a terminal; else a line per log_every)."),
) -> None:
    """Train a model; checkpoints, metrics.jsonl and the model directory go to the output directory."""
    from heed.config import load_config
    from heed.train import train as run_training

    overrides = list(set_) + ([f"output_dir={output_dir.absolute()}"] if output_dir is not None else [])
    cfg = load_config(config, overrides)
    console = _stderr()
    try:
        result = run_training(cfg, resume=resume, console=console, progress=progress)
    except KeyboardInterrupt:
        console.print(f"\n[yellow]aborted. The last checkpoint ({cfg.output_dir / 'checkpoints' / 'last'}) is "
                      f"intact; resume with: heed train {config} --resume"
                      f"{'' if output_dir is None else f' --output-dir {output_dir}'}[/]")
        raise typer.Exit(INTERRUPTED) from None
    if result.stop_reason == "interrupted":
        console.print(f"resume with: heed train {config} --resume"
                      f"{'' if output_dir is None else f' --output-dir {output_dir}'}")
        raise typer.Exit(INTERRUPTED)
    typer.echo(f"model written to {result.model_dir}")


# --------------------------------------------------------------------------------- translate


def _read_lines(stream: Any, name: str) -> Iterator[str]:
    """Decoded lines (without newline) of a binary stream; bad UTF-8 is a DataError naming the line."""
    for number, raw in enumerate(stream, start=1):
        try:
            yield raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as e:
            raise DataError(f"invalid UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1}); "
                            "re-encode the input as UTF-8", path=name, line=number) from None


def _chunks(lines: Iterator[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class _AtomicOutput:
    """A text file written beside its target and renamed into place on success."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> TextIO:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, self.tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        self.file = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        return self.file

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        self.file.close()
        if exc_type is None:
            os.replace(self.tmp, self.path)
        else:
            Path(self.tmp).unlink(missing_ok=True)


@app.command()
@friendly_errors
def translate(
    model: Path = typer.Argument(..., help="Model directory (or a training output directory)."),
    input: Optional[Path] = typer.Option(None, "--input", "-i", help="Source sentences, one per line (default: stdin)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Where to write translations (default: stdout)."),
    beam: Optional[int] = typer.Option(None, "--beam", min=1, help="Beam size (default: the model's decode config; 1 = greedy)."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Sentences per batch."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
) -> None:
    """Translate sentences, one per line: stdin -> stdout, or --input/--output files."""
    from heed.api import Translator

    translator = Translator.load(model, device=device)
    name = str(input) if input is not None else "<stdin>"
    interactive = input is None and sys.stdin.isatty()
    chunk_size = 1 if interactive else batch_size * 16

    def run(source: Any, sink: TextIO) -> None:
        for chunk in _chunks(_read_lines(source, name), chunk_size):
            for t in translator.translate(chunk, beam=beam, batch_size=batch_size):
                sink.write(t.text + "\n")
            sink.flush()

    with (open(input, "rb") if input is not None else _stdin_bytes()) as source:
        if output is None:
            run(source, sys.stdout)
        else:
            with _AtomicOutput(output) as sink:
                run(source, sink)


def _stdin_bytes() -> Any:
    """stdin as bytes, in a context that leaves it open."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text-only stdin (some embeddings)
        return contextlib.nullcontext(io.BytesIO(sys.stdin.read().encode("utf-8")))
    return contextlib.nullcontext(buffer)


# ---------------------------------------------------------------------------------- evaluate


@app.command()
@friendly_errors
def evaluate(
    model: Path = typer.Argument(..., help="Model directory (or a training output directory)."),
    src: Path = typer.Option(..., "--src", help="Source sentences, one per line."),
    ref: Path = typer.Option(..., "--ref", help="Reference translations, line-aligned with --src."),
    beam: Optional[int] = typer.Option(None, "--beam", min=1, help="Beam size (default: the model's decode config)."),
    batch_size: int = typer.Option(64, "--batch-size", min=1),
    hyps: Optional[Path] = typer.Option(None, "--hyps", help="Also write the translations here."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
) -> None:
    """Translate --src and score against --ref: BLEU and chrF (with sacrebleu signatures), exact match."""
    from heed.api import Translator
    from heed.data.corpus import read_parallel
    from heed.evaluate import evaluate as score, format_scores

    pairs = list(read_parallel(src, ref))
    translator = Translator.load(model, device=device)
    outputs = [t.text for t in translator.translate([p.src for p in pairs], beam=beam, batch_size=batch_size)]
    if hyps is not None:
        with _AtomicOutput(hyps) as sink:
            sink.writelines(h + "\n" for h in outputs)
    typer.echo(format_scores(score(outputs, [p.tgt for p in pairs])))


# --------------------------------------------------------------------------------- attention


@app.command()
@friendly_errors
def attention(
    model: Path = typer.Argument(..., help="Model directory (or a training output directory)."),
    sentences: List[str] = typer.Argument(..., help="Source sentences to translate and plot."),
    output: Path = typer.Option(Path("attention.png"), "--output", "-o", help="Figure file: .png, .svg or .pdf."),
    beam: Optional[int] = typer.Option(None, "--beam", min=1, help="Beam size (default: the model's decode config)."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
) -> None:
    """Translate sentences and draw where the model looked: one attention heatmap per sentence."""
    from heed.api import Translator
    from heed.viz import attention_grid, save_figure

    translations = Translator.load(model, device=device).translate(sentences, beam=beam)
    items = [(*t.labels(), t.attention) for t in translations if t.attention is not None and t.src_tokens]
    if not items:
        raise HeedError("nothing to draw: the model has no attention, or every sentence is empty")
    for sentence, t in zip(sentences, translations):
        typer.echo(f"{sentence}\t{t.text}")
    path = save_figure(attention_grid(items, titles=[s for s, t in zip(sentences, translations)
                                                     if t.attention is not None and t.src_tokens]), output)
    typer.echo(f"attention heatmap: {path}")


# -------------------------------------------------------------------------------------- demo


@app.command()
@friendly_errors
def demo(
    output_dir: Path = typer.Option(Path("runs/demo"), "--output-dir", help="Where the demo writes its run."),
    quick: bool = typer.Option(False, "--quick", help="A small, fast run (a smoke test, not the real result)."),
    set_: List[str] = typer.Option([], "--set", metavar="FIELD=VALUE", help="Override a field of configs/demo.yaml."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress"),
) -> None:
    """Generate the multilingual dates task, train a Luong-attention model on it, show translations,
    test accuracy and an attention heatmap."""
    from heed.demo import run_demo

    try:
        run_demo(output_dir=output_dir, quick=quick, overrides=list(set_), console=Console(highlight=False),
                 progress=progress)
    except KeyboardInterrupt:
        _stderr().print("\n[yellow]demo aborted[/]")
        raise typer.Exit(INTERRUPTED) from None


# -------------------------------------------------------------------------------------- main


def main() -> None:
    """Console-script entry point (`heed`, `python -m heed`)."""
    try:
        app()
    except KeyboardInterrupt:
        _stderr().print("[yellow]interrupted[/]")
        sys.exit(INTERRUPTED)
