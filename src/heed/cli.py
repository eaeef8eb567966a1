"""The `heed` command: a thin layer over heed.train, heed.api, heed.evaluate, heed.explain.align, heed.viz
and heed.demo.

Every user mistake (a HeedError, an unreadable file) is printed in a line or two on stderr, naming
the file/line/field and what to do, with exit code 2 and no traceback.
"""
from __future__ import annotations

import contextlib
import enum
import functools
import inspect
import io
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional, TextIO, TypeVar

import typer
from rich.console import Console

import heed
from heed.errors import ConfigError, DataError, HeedError, install_hint
from heed.plumbing.files import atomic_open, open_stream
from heed.plumbing.limits import MAX_ATTRIBUTION_STEPS

if TYPE_CHECKING:
    from rich.table import Table

    from heed.api import Translation, Translator
    from heed.evaluate import Bucket, BucketScore
    from heed.plumbing.distributed import World
    from heed.search import DecodeConfig

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
BROKEN_PIPE = 141


ENSEMBLE_HELP = ("Model directory (or a training output directory, or a `heed export` directory); several "
                 "make an ensemble that decodes with the mean of their log-probabilities (they must share "
                 "tokenizers and vocabularies).")


THREADS_HELP = "torch CPU threads (default: torch's choice, usually one per core)."


def _stderr() -> Console:
    # soft_wrap: rich wraps at 80 columns when stderr is not a terminal, which split log lines
    # ("eta \n23m45s") and hints into pieces no grep or paste could use. A terminal wraps by itself.
    return Console(stderr=True, highlight=False, soft_wrap=True)


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
        except BrokenPipeError:
            # The reader went away (`heed translate ... | head`): not a mistake, so no message. Point
            # stdout at /dev/null so the interpreter's final flush cannot fail again, and exit as a
            # process that SIGPIPE ended would (128 + 13), like `yes | head`.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(BROKEN_PIPE) from None
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
    no_verify: bool = typer.Option(False, "--no-verify", help="Load model directories and exports without "
                                   "checking their files' sha256 (for models too large to hash at every load); "
                                   "non-finite weights are refused all the same."),
) -> None:
    """Sequence-to-sequence translation with attention."""
    from heed.plumbing.files import set_verify_default

    set_verify_default(False if no_verify else None)


# ------------------------------------------------------------------------------------- train


@app.command()
@friendly_errors
def train(
    config: Path = typer.Argument(..., help="YAML config (see configs/*.yaml)."),
    set_: List[str] = typer.Option([], "--set", metavar="FIELD=VALUE",
                                   help="Override a config field, e.g. --set model.hidden_size=256 (repeatable)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in the output directory exactly."),
    allow_data_change: bool = typer.Option(
        False, "--allow-data-change", help="With --resume: go on even if a corpus file changed since the checkpoint."),
    output_dir: Optional[Path] = typer.Option(None, "--output-dir", help="Where to write (overrides output_dir)."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress",
                                            help="Progress bar (default: on a terminal; else a line per log_every)."),
    processes: int = typer.Option(1, "--processes", min=1, max=1024, help="Train data-parallel in this many "
                                  "processes on this machine (gloo on the CPU, one GPU each with CUDA), as "
                                  "torchrun --nproc-per-node N would; Ctrl-C stops them all cleanly."),
) -> None:
    """Train a model; checkpoints, metrics.jsonl and the model directory go to the output directory.

    Ctrl-C or SIGTERM (what Slurm sends before it kills a job) finishes the step, saves
    checkpoints/last, prints the command that resumes this run, and exits with 130 (Ctrl-C) or
    143 (SIGTERM): 128 + the signal's number, as a shell reports a process the signal ended.

    Several processes: `--processes N` on one machine, or torchrun (`torchrun --nproc-per-node N
    -m heed train ...`) across machines; a resume needs as many processes as the run had."""
    import shlex

    from heed.config import load_config
    from heed.plumbing.distributed import World
    from heed.train import score_command
    from heed.train import train as run_training

    overrides = list(set_) + ([f"output_dir={output_dir.absolute()}"] if output_dir is not None else [])
    cfg = load_config(config, overrides)
    world = World.from_env()
    if processes > 1 and world.is_distributed and world.size != processes:
        raise HeedError(f"--processes {processes}, but torchrun's WORLD_SIZE is {world.size}; give one of them")
    console = _stderr()
    # This run's own command line, so the printed resume continues it: same overrides, same directory,
    # same number of processes.
    own = [str(config), *(arg for item in set_ for arg in ("--set", item)),
           *(["--output-dir", str(output_dir)] if output_dir is not None else []),
           *(["--allow-data-change"] if allow_data_change else []),
           *([] if progress is None else ["--progress" if progress else "--no-progress"]),
           *(["--processes", str(processes)] if processes > 1 else [])]
    if processes > 1 and not world.is_distributed:
        from heed.plumbing.launch import launch

        raise typer.Exit(launch(["train", *own, *(["--resume"] if resume else [])], processes))
    if world.is_distributed:
        from heed.plumbing.launch import die_with_launcher

        die_with_launcher()  # a rank of `--processes N` ends with its launcher, even one killed with -9
    launcher, launcher_note = _how_started(world, processes)
    again = [*launcher, "train", *own, "--resume"]
    try:
        result = run_training(cfg, resume=resume, allow_data_change=allow_data_change, console=console,
                              progress=progress)
    except KeyboardInterrupt:
        if not world.is_main:  # with several processes only rank 0 speaks
            raise typer.Exit(INTERRUPTED) from None
        console.print(f"\naborted. The last checkpoint ({cfg.output_dir / 'checkpoints' / 'last'}) is intact; "
                      f"resume with: {shlex.join(again)}", style="yellow", markup=False, soft_wrap=True)
        raise typer.Exit(INTERRUPTED) from None
    if result.stop_reason == "interrupted" and not result.is_main:
        raise typer.Exit(INTERRUPTED if result.stop_signal is None else 128 + result.stop_signal)
    if result.stop_reason == "interrupted":
        # soft_wrap: a command cut across lines could not be pasted back.
        console.print(f"resume with: {shlex.join(again)}{launcher_note}", markup=False, soft_wrap=True)
        score = None if result.model_dir is None else score_command(cfg, result.model_dir, resume_command=again,
                                                                      step=result.steps)
        if score is not None:
            console.print(f"score the best model on the test set with: {shlex.join(score)}", markup=False,
                          soft_wrap=True)
        raise typer.Exit(INTERRUPTED if result.stop_signal is None else 128 + result.stop_signal)
    if result.is_main:
        typer.echo(f"model written to {result.model_dir}")


def _how_started(world: "World", processes: int) -> tuple[list[str], str]:
    """How this run was started, for the commands it prints: (the launcher, a note). `heed` (with
    --processes among the arguments), or torchrun's command line when torchrun started it on one
    machine (`torchrun --nproc-per-node N -m heed`); across machines heed cannot rebuild torchrun's
    command, so the note says to start it as before."""
    if not world.is_distributed or processes > 1:
        return ["heed"], ""
    if int(os.environ.get("LOCAL_WORLD_SIZE", world.size)) == world.size:
        return ["torchrun", "--nproc-per-node", str(world.size), "-m", "heed"], ""
    return ["heed"], f" (on every machine, started by torchrun as before: {world.size} processes in all)"


# ----------------------------------------------------------------------------------- prepare


class _PhaseProgress:
    """`heed prepare`'s progress: one counting bar per phase ("counting", "writing"), on a terminal only."""

    def __init__(self, enabled: Optional[bool]) -> None:
        self.enabled = enabled  # as _Progress's
        self.phase: Optional[str] = None
        self.bar: Optional[_Progress] = None

    def __call__(self, phase: str, pairs: int) -> None:
        if phase != self.phase:
            self.close()
            self.phase = phase
            self.bar = _Progress(f"sentence pairs {phase}", enabled=self.enabled).__enter__()
        assert self.bar is not None
        self.bar.advance(pairs)

    def warn(self, message: str) -> None:
        (self.bar or _Progress("", enabled=False)).warn(message)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


@app.command()
@friendly_errors
def prepare(
    config: Optional[Path] = typer.Argument(None, help="YAML config whose data.train corpus to prepare."),
    set_: List[str] = typer.Option([], "--set", metavar="FIELD=VALUE", help="Override a config field (repeatable)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="The directory to write (new or empty; "
                                          "default: OUTPUT_DIR/prepared)."),
    tokenizers: Optional[Path] = typer.Option(None, "--tokenizers", help="Reuse the tokenizers and vocabularies in "
                                              "this directory (a model directory or a prepared corpus)."),
    sample: int = typer.Option(1_000_000, "--sample", min=1, help="SentencePiece tokenizers train on a uniform "
                               "sample of at most this many pairs (word and char vocabularies count every pair)."),
    shard_tokens: int = typer.Option(1 << 25, "--shard-tokens", min=1, help="Close a shard once it holds this many "
                                     "token ids (both sides)."),
    verify: Optional[Path] = typer.Option(None, "--verify", help="Instead of preparing: check a prepared corpus's "
                                          "files against its manifest (sizes and sha256)."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress",
                                            help="Progress bars (default: on a terminal)."),
) -> None:
    """Tokenize a training corpus once into memory-mapped shards, for corpora larger than memory;
    train on them with `data.prepared: DIR` in place of `data.train`. Streams the corpus (twice when
    tokenizers are trained, once with --tokenizers) and ends with a one-line summary."""
    import time

    if verify is not None:
        if config is not None or set_ or output is not None or tokenizers is not None:
            raise HeedError("--verify DIR checks a prepared corpus; give it alone, without CONFIG or other options")
        from heed.data.codec import Codec
        from heed.data.prepared import read_manifest, verify_files, verify_ids

        started = time.perf_counter()
        manifest = read_manifest(verify)
        checked = verify_files(verify, manifest, hashes=True)
        try:
            codec = Codec.load(verify)
        except HeedError as e:
            raise DataError(str(e)) from None
        verify_ids(verify, manifest, (len(codec.src_vocab), len(codec.tgt_vocab)))
        shards = len(manifest["shards"])
        typer.echo(f"{verify}: {manifest['sentences']:,} sentence pairs in {shards} shard{'s' * (shards != 1)} match "
                   f"the manifest (sizes and sha256 of {checked / 1e6:,.1f} MB), every id within its vocabulary: "
                   f"{time.perf_counter() - started:.1f} s")
        return
    if config is None:
        raise HeedError("give a CONFIG to prepare (or --verify DIR to check a prepared corpus)")
    from heed.config import load_config
    from heed.data.prepare import prepare as run_prepare

    cfg = load_config(config, list(set_))
    bars = _PhaseProgress(enabled=progress)
    try:
        result = run_prepare(cfg, output if output is not None else cfg.output_dir / "prepared",
                             tokenizers_from=tokenizers, sample_pairs=sample, shard_tokens=shard_tokens,
                             progress=bars, warn=bars.warn)
    finally:
        bars.close()
    typer.echo(result.summary())


# --------------------------------------------------------------------------------- translate


def _read_lines(stream: Any, name: str) -> Iterator[str]:
    """Decoded lines (without their ends) of a binary stream, by the corpus readers' rules: lines end
    at \\n, \\r\\n or \\r; invalid UTF-8, control characters and lines over 1 MiB are DataErrors naming
    the line."""
    from heed.data.corpus import decode_line, physical_lines

    for number, raw in enumerate(physical_lines(stream, name), start=1):
        yield decode_line(raw, name, number)


def _chunks(lines: Iterator[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


PROGRESS_LINE_SECONDS = 5.0  # asked for progress where stderr is no terminal: a line this often


def progress_option() -> Any:
    """`--progress/--no-progress` for a command that may run for minutes."""
    return typer.Option(None, "--progress/--no-progress",
                        help="Show progress on stderr: a bar on a terminal, a line every "
                             f"{PROGRESS_LINE_SECONDS:g} s elsewhere (a log). Default: a bar on a terminal only.")


class _Progress:
    """Sentences done, on stderr, never on stdout: a bar while stderr is a terminal; where it is not
    (a log), a plain line every PROGRESS_LINE_SECONDS when asked. `enabled`: None = a bar on a
    terminal, nothing elsewhere; True = also the lines elsewhere; False = nothing. `warn` prints
    above the bar."""

    def __init__(self, what: str, total: Optional[int] = None, *, enabled: Optional[bool] = None) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = _stderr()
        self._bar: Optional[Progress] = None
        self._what, self._total, self._done = what, total, 0
        self._lines = bool(enabled) and not self.console.is_terminal
        self._started = self._said = time.monotonic()
        if enabled is not False and self.console.is_terminal:
            columns = ([TextColumn(what), BarColumn(), MofNCompleteColumn()] if total is not None
                       else [SpinnerColumn(), TextColumn(f"{{task.completed}} {what}")])
            # No redirection: translations written to stdout must stay on stdout.
            self._bar = Progress(*columns, TimeElapsedColumn(), console=self.console, transient=True,
                                 redirect_stdout=False, redirect_stderr=False)
            self._task = self._bar.add_task(what, total=total)

    def __enter__(self) -> "_Progress":
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
        if self._lines and exc[0] is None:
            self._line()

    def advance(self, n: int) -> None:
        self._done += n
        if self._bar is not None:
            self._bar.advance(self._task, n)
        elif self._lines and time.monotonic() - self._said >= PROGRESS_LINE_SECONDS:
            self._line()

    def _line(self) -> None:
        self._said = time.monotonic()
        of = f" of {self._total:,}" if self._total is not None else ""
        self.console.print(f"{self._what}: {self._done:,}{of} ({self._said - self._started:.0f} s)",
                           highlight=False, soft_wrap=True)

    def warn(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/] {_escape(message)}", soft_wrap=True)


def _translate_chunks(translator: "Translator", lines: Iterable[str], *, name: str, chunk_size: int,
                      progress: _Progress, decode: "DecodeConfig", batch_size: int, replace_unk: bool = False,
                      dictionary: Optional[dict[str, str]] = None) -> "Iterator[list[list[Translation]]]":
    """`translator.translate_nbest(chunk, decode=decode, ...)` (per line, its n-best list, best
    first) for each `chunk_size` lines, advancing `progress` and warning about sources cut to the
    model's max_src_len by their line numbers in `name`."""
    first = 1
    for chunk in _chunks(iter(lines), chunk_size):
        translations = translator.translate_nbest(chunk, decode=decode, batch_size=batch_size,
                                                  replace_unk=replace_unk, dictionary=dictionary)
        cut = [first + k for k, nbest in enumerate(translations) if nbest[0].truncated]
        if cut:
            progress.warn(_truncation_message(cut, name, translator.max_src_len))
        progress.advance(len(chunk))
        first += len(chunk)
        yield translations


def _warn_long_sources(translator: "Translator", sources: Sequence[str], name: str) -> None:
    """translate's warning, for commands that read all their sources at once (attribute,
    faithfulness): the lines of `name` longer than the model's max_src_len, which are cut to it."""
    limit = translator.max_src_len
    cut = [number for number, text in enumerate(sources, start=1) if len(translator.codec.src_tokens(text)) > limit]
    if cut:
        _Progress("", enabled=False).warn(_truncation_message(cut, name, limit))


def _truncation_message(lines: Sequence[int], name: str, limit: int, shown: int = 10) -> str:
    listed = ", ".join(map(str, lines[:shown])) + (f" and {len(lines) - shown} more" if len(lines) > shown else "")
    return (f"{name}: line{'s' * (len(lines) > 1)} {listed} {'are' if len(lines) > 1 else 'is'} longer than the "
            f"model's max_src_len ({limit} tokens); only the first {limit} tokens were translated (split long "
            "sentences)")


REPLACE_UNK_HELP = ("Replace each <unk> in the output by the source token it attended to most "
                    "(copied, or translated by --dictionary).")
DICTIONARY_HELP = "A source<TAB>target word list for --replace-unk (implies it); first entry wins."
BF16_HELP = ("Decode in bfloat16: for batches of a large model on a GPU. On the CPU it was slower everywhere "
             "measured (a 3+3-layer Transformer of 256: half the speed at batch 64 on an Intel Xeon without native "
             "bf16; on one with AMX, 156 against float32's 197 sentences/s); measure before you use it there. The "
             "outputs may differ a little from float32's.")


# ---------------------------------------------------------------------------- decode options


# A flag for every heed.search.DecodeConfig field: (field, flag, type, help). Each help is the
# field's description with field names written as flags (tests/test_cli_decode.py holds them
# together); it is written out here, not read from DecodeConfig, because heed.search imports
# torch, which would make every `heed --help` take seconds.
DECODE_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("beam_size", "--beam", int, "Beam size; 1 = greedy."),
    ("n_best", "--n-best", int, "Hypotheses returned per sentence, at most --beam. `heed translate` writes "
     "them all (see its help); the other commands use the best."),
    ("length_penalty", "--length-penalty", float, "Length penalty: GNMT alpha; 0 = off."),
    ("coverage_penalty", "--coverage-penalty", float, "Coverage penalty: GNMT beta; 0 = off; needs attention."),
    ("min_len", "--min-len", int, "Output tokens before EOS is allowed (EOS not counted); 0 allows an empty "
     "output."),
    ("max_len_a", "--max-len-a", float, "Max output tokens = floor(a * src_len + b), EOS not counted, and at most "
     "4096; this sets a."),
    ("max_len_b", "--max-len-b", int, "B of --max-len-a's formula."),
    ("no_repeat_ngram", "--no-repeat-ngram", int, "Forbid repeating any n-gram of this size; 0 = off."),
    ("forbid_unk", "--forbid-unk/--allow-unk", bool, "Never emit <unk>: a copy model copies the source word "
     "instead, any other model writes its next most likely token."),
    ("sampling", "--sampling/--no-sampling", bool, "Draw --n-best samples per sentence instead of searching "
     "(--beam must be 1). --sampling without --beam samples with --beam 1."),
    ("temperature", "--temperature", float, "With --sampling: divide the logits by this; < 1 is sharper."),
    ("top_k", "--top-k", int, "With --sampling: draw from the k most likely tokens only; 0 = all."),
    ("top_p", "--top-p", float, "With --sampling: draw from the smallest set of tokens whose probability reaches p "
     "(nucleus); 1 = all."),
    ("seed", "--seed", int, "With --sampling: the random seed; the same seed and source give the same samples in any "
     "batch (None: a fresh seed). Without --seed the seed drawn is printed on stderr."),
)
DECODE_FLAG = {field: flag.split("/")[0] for field, flag, _, _ in DECODE_FLAGS}
# Field names: those with an underscore anywhere; plain words ("seed") only where they lead the text
# ("sampling: ...", "sampling draws ..."), as elsewhere they are English ("the random seed").
_DECODE_FIELD_WORD = re.compile(r"\b(" + "|".join(f for f in DECODE_FLAG if "_" in f) + r")\b|^("
                                + "|".join(f for f in DECODE_FLAG if "_" not in f) + r")\b")


def flag_words(text: str) -> str:
    """`text` with DecodeConfig field names written as their flags ("n_best" -> "--n-best")."""
    return _DECODE_FIELD_WORD.sub(lambda m: DECODE_FLAG[m.group(m.lastindex or 0)], text)


def decode_options(command: F) -> F:
    """Give `command` the DECODE_FLAGS, each None (= the model's decode config) unless given. The
    command takes a keyword-only `decode`: {DecodeConfig field: value} of the flags given."""
    signature = inspect.signature(command, eval_str=True)
    flags = [inspect.Parameter(field, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[kind],
                               default=typer.Option(None, flag, help=f"{help} Default: the model's decode config.",
                                                    show_default=False))
             for field, flag, kind, help in DECODE_FLAGS]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {field: kwargs.pop(field) for field in DECODE_FLAG}
        return command(*args, decode={k: v for k, v in given.items() if v is not None}, **kwargs)

    # typer reads a command's options from its signature: the command's own, less `decode`, then the flags.
    own = [p for name, p in signature.parameters.items() if name != "decode"]
    wrapper.__signature__ = signature.replace(parameters=[*own, *flags])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in (*own, *flags)}
    return wrapper  # type: ignore[return-value]


def resolve_decode(translator: "Translator", decode: dict[str, Any], *, label: str = "") -> "DecodeConfig":
    """The translator's decode config with the flags given (`decode`, from `decode_options`) applied,
    validated; a bad value is a HeedError naming its flag. Sampling without --seed gets one seed,
    printed on stderr, for all the input (and for the user to draw the same again)."""
    overrides = dict(decode)
    beam = overrides.pop("beam_size", None)
    if beam is None and overrides.get("sampling"):
        beam = 1  # sampling draws instead of searching: the model's beam size would only clash
    try:
        cfg = translator.resolve_decode(beam, overrides)
    except ConfigError as e:
        raise HeedError(_decode_flag_message(e, decode)) from None
    if cfg.sampling and decode.get("seed") is None:
        _stderr().print(f"{label + ': ' if label else ''}sampling with seed {cfg.seed} (--seed {cfg.seed} draws "
                        "the same samples again)", markup=False, soft_wrap=True)
    return cfg


def _decode_flag_message(error: ConfigError, given: dict[str, Any]) -> str:
    """A decode ConfigError ("field 'decode.top_p': Input should be ...") in flag words:
    "--top-p: input should be ... (got 1.5)"."""
    field = (error.field or "").removeprefix("decode.")
    message = flag_words(error.message[:1].lower() + error.message[1:])
    flag = DECODE_FLAG.get(field)
    if flag is None:
        return f"decode settings: {message}"
    if flag not in message and field in given:  # a one-field check; pydantic's message omits the value
        message += f" (got {given[field]})"
    # A clash with a value the user did not give ("--n-best (2) cannot exceed --beam (1)"): say where it is from.
    implicit = [f for name, f in DECODE_FLAG.items()
                if name not in given and re.search(f"{f} (\\(|-?\\d)", message)]  # "--beam (1)", "--max-len-b 0"
    if implicit:
        message += f" ({', '.join(implicit)}: the model's decode config)"
    return message if message.startswith(flag) else f"{flag}: {message}"


def nbest_lines(first_id: int, chunk: "Sequence[list[Translation]]") -> Iterator[str]:
    """Moses-style n-best lines, `SENT_ID ||| text ||| score`, best first for each source; SENT_ID
    counts sources from 0, `first_id` being `chunk[0]`'s."""
    for k, nbest in enumerate(chunk):
        for t in nbest:
            yield f"{first_id + k} ||| {t.text} ||| {round(t.score, 4) + 0.0:.4f}\n"  # + 0.0: no "-0.0000"


@app.command()
@friendly_errors
@decode_options
def translate(
    models: List[Path] = typer.Argument(..., metavar="MODEL...", help=ENSEMBLE_HELP),
    input: Optional[Path] = typer.Option(None, "--input", "-i", help="Source sentences, one per line (default: stdin)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Where to write translations (default: stdout)."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Sentences per batch."),
    replace_unk: bool = typer.Option(False, "--replace-unk", help=REPLACE_UNK_HELP),
    dictionary: Optional[Path] = typer.Option(None, "--dictionary", help=DICTIONARY_HELP),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    progress: Optional[bool] = progress_option(),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help=THREADS_HELP),
    bf16: bool = typer.Option(False, "--bf16", help=BF16_HELP),
    *,
    decode: dict[str, Any],
) -> None:
    """Translate sentences, one per line: stdin -> stdout, or --input/--output files.

    With --n-best K > 1 (or a model whose decode config has n_best > 1), each source gets up to K
    lines, best first, in the Moses n-best style "SENT_ID ||| text ||| score": SENT_ID counts the
    input lines from 0, score is the search's ranking score (log-probability after the length and
    coverage penalties) with 4 decimals; an empty line gets one line with empty text. --sampling
    --n-best K gives K samples per source the same way.

    Several models (`heed translate A B C`) translate as an ensemble: each step of the search uses
    the mean of the models' log-probabilities (and their mean attention), with the first model's
    decode config. Ensembles of independently trained models usually beat each of them.

    A source longer than the model's data.max_src_len tokens (the longest it was trained on) is cut to
    that many tokens, with a warning on stderr naming its line. A progress bar goes to stderr when it is
    a terminal (and stdout is not)."""
    from heed.api import Translator
    from heed.explain.align import load_dictionary
    from heed.plumbing.runtime import torch_threads

    if input is None and (sys.stdin is None or sys.stdin.closed):
        raise HeedError("no input: stdin is closed; give --input FILE")
    if output is None and (sys.stdout is None or sys.stdout.closed):
        raise HeedError("no output: stdout is closed; give --output FILE")
    table = load_dictionary(dictionary) if dictionary is not None else None
    translator = Translator.load(models, device=device, bf16=bf16)
    cfg = resolve_decode(translator, decode)  # before reading: a bad flag fails before any input is typed
    name = str(input) if input is not None else "<stdin>"
    interactive = input is None and sys.stdin.isatty()
    chunk_size = 1 if interactive else batch_size * 16
    # Translations streaming to a terminal are their own progress; a bar would tangle with them.
    streaming = interactive or (output is None and sys.stdout.isatty())
    show_progress = progress if progress is not None else (False if streaming else None)

    def run(source: Any, sink: TextIO) -> None:
        first_id = 0
        with _Progress("lines translated", enabled=show_progress) as progress:
            for chunk in _translate_chunks(translator, _read_lines(source, name), name=name, chunk_size=chunk_size,
                                           progress=progress, decode=cfg, batch_size=batch_size,
                                           replace_unk=replace_unk, dictionary=table):
                if cfg.n_best > 1:
                    sink.writelines(nbest_lines(first_id, chunk))
                else:
                    sink.writelines(nbest[0].text + "\n" for nbest in chunk)
                sink.flush()
                first_id += len(chunk)

    with torch_threads(threads), (open_stream(input) if input is not None else _stdin_bytes()) as source:
        if output is None:
            run(source, sys.stdout)
        else:
            with atomic_open(output) as sink:
                run(source, sink)


def _stdin_bytes() -> Any:
    """stdin as bytes, in a context that leaves it open."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text-only stdin (some embeddings)
        return contextlib.nullcontext(io.BytesIO(sys.stdin.read().encode("utf-8")))
    return contextlib.nullcontext(buffer)


# ---------------------------------------------------------------------------------- evaluate


class LengthUnit(str, enum.Enum):
    words = "words"
    chars = "chars"
    tokens = "tokens"


class PlotMetric(str, enum.Enum):
    bleu = "bleu"
    chrf = "chrf"
    exact_match = "exact_match"


METRIC_NAMES = {"bleu": "BLEU", "chrf": "chrF", "exact_match": "exact match (%)"}
BUCKETS_HELP = ("Source-length buckets, both ends included, e.g. 1-10,11-20,21+ (default, the same for "
                "every test set: words 0-5,6-10,11-15,16-20,21-30,31-40,41-50,51+; tokens 0-10,11-20,21-30,"
                "31-40,41-60,61-80,81-100,101+; chars 0-25,26-50,51-75,76-100,101-150,151-200,201-250,251+; "
                "empty buckets are left out; implies --by-length).")
LENGTH_UNIT_HELP = ("What source length counts: whitespace words (default), characters, or the model's "
                    "own tokens (implies --by-length).")
PLOT_HELP = "Also draw the scores by length: .png, .svg or .pdf (implies --by-length)."
PLOT_METRIC_HELP = "The score the plot shows."


@app.command()
@friendly_errors
@decode_options
def evaluate(
    models: List[Path] = typer.Argument(..., metavar="MODEL...", help=ENSEMBLE_HELP),
    src: Path = typer.Option(..., "--src", help="Source sentences, one per line."),
    ref: Path = typer.Option(..., "--ref", help="Reference translations, line-aligned with --src."),
    batch_size: int = typer.Option(64, "--batch-size", min=1),
    hyps: Optional[Path] = typer.Option(None, "--hyps", help="Also write the translations here."),
    replace_unk: bool = typer.Option(False, "--replace-unk", help=REPLACE_UNK_HELP),
    dictionary: Optional[Path] = typer.Option(None, "--dictionary", help=DICTIONARY_HELP),
    by_length: bool = typer.Option(False, "--by-length", help="Also score each source-length bucket: a table "
                                   "of sentences, BLEU, chrF and exact match per bucket."),
    buckets: Optional[str] = typer.Option(None, "--buckets", metavar="RANGES", help=BUCKETS_HELP),
    length_unit: Optional[LengthUnit] = typer.Option(None, "--length-unit", help=LENGTH_UNIT_HELP),
    plot: Optional[Path] = typer.Option(None, "--plot", help=PLOT_HELP),
    plot_metric: PlotMetric = typer.Option(PlotMetric.bleu, "--plot-metric", help=PLOT_METRIC_HELP),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    progress: Optional[bool] = progress_option(),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help=THREADS_HELP),
    bf16: bool = typer.Option(False, "--bf16", help=BF16_HELP),
    *,
    decode: dict[str, Any],
) -> None:
    """Translate --src and score against --ref: BLEU and chrF (with sacrebleu signatures), exact match;
    with --by-length, also per source-length bucket. With --n-best or --sampling, the best
    hypothesis of each source is scored. Several models are scored as one ensemble (as `heed
    translate A B` decodes); to score models side by side, use `heed compare`.

    A source longer than the model's data.max_src_len tokens is cut to that many tokens, with a warning
    on stderr naming its line. A progress bar goes to stderr when it is a terminal."""
    from heed.api import Translator
    from heed.data.corpus import read_parallel
    from heed.evaluate import evaluate as score
    from heed.evaluate import format_scores
    from heed.explain.align import load_dictionary
    from heed.plumbing.runtime import torch_threads

    bucket_list = _parse_buckets(buckets)
    _check_figure_path(plot)
    table = load_dictionary(dictionary) if dictionary is not None else None
    pairs = list(read_parallel(src, ref, streams=True))
    translator = Translator.load(models, device=device, bf16=bf16)
    cfg = resolve_decode(translator, decode)
    # In chunks, as `heed translate` does, so both give the same outputs for the same file.
    with torch_threads(threads), _Progress("translating", total=len(pairs), enabled=progress) as bar:
        translations = [nbest[0] for chunk in _translate_chunks(
            translator, [p.src for p in pairs], name=str(src), chunk_size=batch_size * 16, progress=bar,
            decode=cfg, batch_size=batch_size, replace_unk=replace_unk, dictionary=table) for nbest in chunk]
    outputs = [t.text for t in translations]
    if hyps is not None:
        with atomic_open(hyps) as sink:
            sink.writelines(h + "\n" for h in outputs)
    typer.echo(format_scores(score(outputs, [p.tgt for p in pairs])))
    if by_length or buckets is not None or length_unit is not None or plot is not None:
        unit = (length_unit or LengthUnit.words).value
        results = _scores_by_length([p.src for p in pairs], {" + ".join(_model_names(models, None)): outputs},
                                    [p.tgt for p in pairs], bucket_list, unit, translations)
        _show_by_length(results, unit, len(pairs), plot, plot_metric.value)


def _parse_buckets(spec: Optional[str]) -> "Optional[list[Bucket]]":
    from heed.evaluate import parse_buckets

    return None if spec is None else parse_buckets(spec)


def _check_figure_path(path: Optional[Path]) -> None:
    """A wrong figure suffix is a user error before any translating, not after."""
    from heed.viz import figure_format

    if path is not None:
        figure_format(path)


def _scores_by_length(srcs: Sequence[str], outputs: dict[str, list[str]], refs: Sequence[str],
                      buckets: "Optional[list[Bucket]]", unit: str,
                      translations: "Sequence[Translation]") -> "dict[str, list[BucketScore]]":
    """{model name: bucket scores}; every model's sentences fall in the same buckets. Token
    lengths are those of `translations`' source tokens (one model's tokenizer)."""
    from heed.evaluate import by_length, default_buckets, source_lengths

    lengths = [len(t.src_tokens) for t in translations] if unit == "tokens" else source_lengths(srcs, unit)
    buckets = buckets if buckets is not None else default_buckets(unit)
    return {name: by_length(srcs, hyps, refs, buckets, lengths=lengths) for name, hyps in outputs.items()}


def _show_by_length(results: "dict[str, list[BucketScore]]", unit: str, total: int, plot: Optional[Path],
                    metric: str) -> None:
    """The by-length table on stdout, a row per bucket (and model, when there are several), and,
    with `plot`, the figure."""
    from rich.table import Table

    first = next(iter(results.values()))
    several = len(results) > 1
    typer.echo("")
    table = Table(title=f"scores by source length ({unit})", title_justify="left", box=None, pad_edge=False)
    table.add_column(f"length ({unit})")
    table.add_column("sentences", justify="right")
    if several:
        table.add_column("model")
    for column in ("BLEU", "chrF", "exact match"):
        table.add_column(column, justify="right")
    for k, bucket in enumerate(first):
        for m, (name, rows) in enumerate(results.items()):
            b = rows[k]
            lead = [bucket.label, str(bucket.count)] if m == 0 else ["", ""]
            table.add_row(*lead, *([name] if several else []), f"{b.bleu:.2f}", f"{b.chrf:.2f}",
                          f"{b.exact_match:.1f}% ({b.exact}/{b.count})")
    _print_table(table)
    outside = total - sum(b.count for b in first)
    if outside:
        typer.echo(f"{outside} of {total} sentences fall in no bucket and are left out of this table")
    if plot is not None:
        from heed.viz import length_plot, save_figure

        series = {name: [(f"{b.label}\nn={b.count}", getattr(b, metric)) for b in rows]
                  for name, rows in results.items()}
        path = save_figure(length_plot(series, metric=METRIC_NAMES[metric], unit=unit), plot)
        typer.echo(f"plot: {path}")


def _print_table(table: "Table") -> None:
    Console(highlight=False, soft_wrap=False).print(table)


# --------------------------------------------------------------------------------- attention


@app.command()
@friendly_errors
@decode_options
def attention(
    model: Path = typer.Argument(..., help="Model directory (or a training output directory; with --checkpoints "
                                 "or --entropy, the training output directory)."),
    sentences: Optional[List[str]] = typer.Argument(None, help="Source sentences to translate and plot (one with "
                                                    "--checkpoints, none with --entropy)."),
    output: Path = typer.Option(Path("attention.png"), "--output", "-o", help="Figure file: .png, .svg or .pdf."),
    checkpoints: bool = typer.Option(False, "--checkpoints", help="Draw how the sentence's attention changed over "
                                     "training: one heatmap per kept checkpoint of the run (checkpoints/step-*, "
                                     "train.keep_checkpoints), all reading the same output."),
    target: Optional[str] = typer.Option(None, "--tgt", help="With --checkpoints: the output every checkpoint "
                                         "reads (default: the run's model's translation of the sentence)."),
    most: int = typer.Option(12, "--most", min=1, max=48, help="With --checkpoints: draw at most this many, evenly "
                             "spaced (the first and the last always)."),
    entropy: bool = typer.Option(False, "--entropy", help="Draw each head's attention entropy over training from "
                                 "the run's metrics.jsonl (logged at every dev evaluation)."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    *,
    decode: dict[str, Any],
) -> None:
    """Translate sentences and draw where the model looked: one attention heatmap per sentence.

    A Transformer's heatmap is the cross-attention of its last decoder layer, averaged over the heads.
    A sentence longer than the model's data.max_src_len tokens is cut to that many (with a warning); a
    heatmap over more than 200 tokens a side is unreadable and refused.

    Over training: `heed attention RUN --checkpoints "one sentence"` draws its attention at each
    checkpoint the run kept; `heed attention RUN --entropy` draws each head's entropy curve."""
    from heed.viz import MAX_HEATMAP_TOKENS, attention_grid, save_figure

    sentences = list(sentences or [])
    _check_figure_path(output)
    if checkpoints and entropy:
        raise HeedError("--checkpoints and --entropy draw different figures; give one of them")
    if target is not None and not checkpoints:
        raise HeedError("--tgt is the output the checkpoints read: it goes with --checkpoints")
    if entropy:
        if sentences:
            raise HeedError("--entropy draws the run's logged entropy and translates nothing: leave out the sentences")
        _draw_entropy(model, output)
        return
    if checkpoints:
        if len(sentences) != 1:
            raise HeedError(f"--checkpoints draws one sentence over training; got {len(sentences)}")
        _draw_history(model, sentences[0], target, most=most, output=output, device=device, decode=decode)
        return
    if not sentences:
        raise HeedError("give one or more source sentences to translate and draw")
    from heed.api import Translator

    translator = Translator.load(model, device=device)
    cfg = resolve_decode(translator, decode)
    for number, sentence in enumerate(sentences, start=1):  # before translating: the source bounds the cost
        length = min(len(translator.codec.src_tokens(sentence)), translator.max_src_len)
        if length + 1 > MAX_HEATMAP_TOKENS:  # + the </s> column
            raise HeedError(f"sentence {number} ({_preview(sentence)}) is {length} tokens long; a heatmap over more "
                            f"than {MAX_HEATMAP_TOKENS} tokens a side is unreadable: give a shorter sentence")
    translations = translator.translate(sentences, decode=cfg)
    cut = [k for k, t in enumerate(translations, start=1) if t.truncated]
    if cut:
        _stderr().print(f"[yellow]warning:[/] {_escape(_truncation_message(cut, 'sentences', translator.max_src_len))}",
                        soft_wrap=True)
    for number, (sentence, t) in enumerate(zip(sentences, translations), start=1):
        if len(t.tokens) + 1 > MAX_HEATMAP_TOKENS:
            raise HeedError(f"the translation of sentence {number} ({_preview(sentence)}) is {len(t.tokens)} tokens "
                            f"long; a heatmap over more than {MAX_HEATMAP_TOKENS} tokens a side is unreadable: "
                            "give a shorter sentence")
    items = [(*t.labels(), t.attention) for t in translations if t.attention is not None and t.src_tokens]
    if not items:
        raise HeedError("nothing to draw: the model has no attention, or every sentence is empty")
    for sentence, t in zip(sentences, translations):
        typer.echo(f"{sentence}\t{t.text}")
    path = save_figure(attention_grid(items, titles=[s for s, t in zip(sentences, translations)
                                                     if t.attention is not None and t.src_tokens]), output)
    typer.echo(f"attention heatmap: {path}")


def _draw_history(run: Path, sentence: str, target: Optional[str], *, most: int, output: Path, device: str,
                  decode: dict[str, Any]) -> None:
    """heed attention RUN --checkpoints: one heatmap per kept checkpoint, in step order."""
    from heed.api import EOS_TOKEN, Translator
    from heed.explain.history import attention_over_training, final_model
    from heed.viz import MAX_HEATMAP_TOKENS, attention_grid, save_figure

    if not sentence.strip():
        raise HeedError("the sentence is empty: give a source sentence to follow over training")
    final = Translator.load(final_model(run), device=device)
    if target is not None:  # a token the model does not know is refused, as translate's --prefix is
        try:
            final.forced_pairs([sentence], [target], empty="give a source sentence to follow over training")
        except HeedError as e:
            raise HeedError(f"--tgt: {str(e).partition(': ')[2]}") from None
    cfg = None if target is not None else resolve_decode(final, decode)
    history = attention_over_training(run, sentence, target, most=most, decode=cfg, final=final, device=device)
    if max(len(history.src_tokens), len(history.tgt_tokens)) + 1 > MAX_HEATMAP_TOKENS:
        raise HeedError(f"the pair is longer than {MAX_HEATMAP_TOKENS} tokens a side: a heatmap of it is unreadable; "
                        "give a shorter sentence")
    src, tgt = [*history.src_tokens, EOS_TOKEN], [*history.tgt_tokens, EOS_TOKEN]
    items = [(src, tgt, s.weights) for s in history.snapshots]
    titles = [s.title() for s in history.snapshots]
    path = save_figure(attention_grid(items, titles=titles, cols=min(4, len(items))), output)
    shown = len(history.snapshots)
    some = f"{shown} of {history.kept}" if shown < history.kept else str(shown)
    spaced = "evenly spaced, " if shown < history.kept else ""
    typer.echo(f"{sentence}\t{final.codec.tgt_tokenizer.detokenize(list(history.tgt_tokens))}")
    typer.echo(f"attention at {some} checkpoints ({spaced}steps {history.snapshots[0].step:,} to "
               f"{history.snapshots[-1].step:,}): {path}")


def _draw_entropy(run: Path, output: Path) -> None:
    """heed attention RUN --entropy: every head's entropy curve from the run's metrics.jsonl."""
    from heed.explain.history import entropy_history
    from heed.viz import entropy_curves, save_figure

    steps, values = entropy_history(run)
    path = save_figure(entropy_curves(steps, values), output)
    last = values[-1]
    typer.echo(f"attention entropy at {len(steps)} evaluations (steps {steps[0]:,} to {steps[-1]:,}); at the last, "
               f"{last.min():.2f} to {last.max():.2f} nats over {last.size} head(s): {path}")


def _preview(sentence: str, chars: int = 40) -> str:
    """The start of a sentence, quoted, for a one-line message."""
    return repr(sentence if len(sentence) <= chars else sentence[:chars] + "...")


# ------------------------------------------------------------------------------------- align


class AlignMethod(str, enum.Enum):
    argmax = "argmax"
    shift = "shift"


class AlignUnits(str, enum.Enum):
    words = "words"
    chars = "chars"


class SymmetrizeHow(str, enum.Enum):
    intersect = "intersect"
    union = "union"
    grow_diag_final = "grow-diag-final"


@app.command()
@friendly_errors
def align(
    model: Path = typer.Argument(..., help="Model directory (or a training output directory)."),
    src: Path = typer.Option(..., "--src", help="Source sentences, one per line."),
    tgt: Path = typer.Option(..., "--tgt", help="Their translations, line-aligned with --src."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Where to write the alignments (default: stdout)."),
    gold: Optional[Path] = typer.Option(None, "--gold", help="Optional gold alignments (Pharaoh; i-j or i-j-S sure, i-j-P, "
                                        "i?j or ipj possible): print the alignment error rate, beside the diagonal "
                                        "baseline's."),
    method: AlignMethod = typer.Option(AlignMethod.argmax, "--method", help="argmax: link each target word by the "
                                       "step that predicts it; shift: by the step that reads it as input "
                                       "(shift-att, Chen et al. 2020)."),
    layer: Optional[str] = typer.Option(None, "--layer", help="Decoder layer to read (0-based) or 'mean' for all "
                                        "layers' average. Default: the last (a Transformer) or the only one (an RNN)."),
    head: Optional[str] = typer.Option(None, "--head", help="Attention head (0-based), or 'mean'. Default: the mean "
                                       "of the layer's heads."),
    tgt_units: AlignUnits = typer.Option(AlignUnits.words, "--tgt-units", help="Target positions in whitespace words, "
                                         "or in characters (spaces not counted; the dates task's gold is so)."),
    reverse: Optional[Path] = typer.Option(None, "--reverse", help="A model trained the other way (target -> "
                                           "source): its alignments are joined with this model's by --symmetrize."),
    symmetrize: SymmetrizeHow = typer.Option(SymmetrizeHow.grow_diag_final, "--symmetrize", help="With --reverse: "
                                             "keep links both agree on (intersect), either has (union), or "
                                             "grow-diag-final-and (Koehn et al. 2005)."),
    reference: Optional[Path] = typer.Option(None, "--reference", help="With --gold: another aligner's Pharaoh file "
                                             "(e.g. fast_align's), scored beside the model."),
    beside: Optional[Path] = typer.Option(None, "--beside", help="Another model on the same vocabularies (e.g. the "
                                          "int8 export of this one): its attention read on the same pairs, the mean "
                                          "|difference| per cell and the links that differ (and its AER with --gold)."),
    sweep_all: bool = typer.Option(False, "--sweep", help="With --gold: the AER of every method x layer x head (and "
                                   "their means) as a table and a heatmap (--plot), instead of writing alignments."),
    plot: Path = typer.Option(Path("aer_sweep.png"), "--plot", help="With --sweep: the heatmap's file (.png, .svg, .pdf)."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Sentence pairs per batch."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    progress: Optional[bool] = progress_option(),
) -> None:
    """Word-align --src with --tgt by the model's attention: each target word is linked to the source
    word it attends to most while the model reads --tgt as its own output (forced decoding).

    One Pharaoh line per sentence pair: "i-j" links, i a 0-based word of the source, j of the target,
    words being the whitespace-separated words whatever the model's tokens (subword and character
    attention is summed over each source word's pieces and averaged over each target word's); with
    --tgt-units chars, j counts the target's characters. A Transformer aligns by default with the
    cross-attention of its last decoder layer, averaged over the heads; --layer, --head and --method
    choose another reading, and --sweep --gold scores them all. With --gold the alignment error rate
    goes to stdout, or to stderr when the alignments do, beside the diagonal baseline (target word j
    -> source word round(j*|src|/|tgt|)), which a useful reading must beat. --beside OTHER reads the
    same pairs with another model (the int8 export of this one, say) and says how far its attention
    and links are from this model's."""
    from heed.explain.align_methods import AlignOptions, parse_index, unit_count

    try:
        options = AlignOptions(method=method.value, layer=parse_index(layer, "--layer"),
                               head=parse_index(head, "--head"), tgt_units=tgt_units.value)
    except ValueError as e:
        raise HeedError(str(e)) from None
    if (sweep_all or reference is not None) and gold is None:
        raise HeedError(f"{'--sweep' if sweep_all else '--reference'} scores against gold alignments: give --gold FILE")
    if sweep_all and (reverse is not None or output is not None):
        raise HeedError("--sweep prints AER and writes no alignments: leave out --reverse and --output")
    if reverse is not None and options.tgt_units != "words":
        raise HeedError("--reverse aligns whitespace words both ways: it needs --tgt-units words")
    if beside is not None and (sweep_all or reverse is not None):
        raise HeedError(f"--beside compares one reading of two models: leave out {'--sweep' if sweep_all else '--reverse'}")
    if sweep_all:
        from heed.viz import figure_format

        figure_format(plot)  # a bad suffix fails before the work
    from heed.api import Translator
    from heed.data.corpus import read_parallel

    pairs = list(read_parallel(src, tgt, streams=True))
    src_texts, tgt_texts = [p.src for p in pairs], [p.tgt for p in pairs]
    units = [(len(p.src.split()), unit_count(p.tgt, options.tgt_units)) for p in pairs]
    golden = theirs = None
    if gold is not None:
        from heed.explain.align import read_gold_for

        hint = "" if options.tgt_units == "chars" else ", or characters with --tgt-units chars"
        golden = read_gold_for(gold, units, units=options.tgt_units, sides=f"{src} and {tgt}", hint=hint)
        if reference is not None:  # another aligner's links: every link counts, sure or not
            theirs = read_gold_for(reference, units, units=options.tgt_units, sides=f"{src} and {tgt}", hint=hint)[1]
    translator = Translator.load(model, device=device)
    other = Translator.load(beside, device=device) if beside is not None else None
    if sweep_all:
        assert golden is not None
        _print_sweep(translator.align_sweep(src_texts, tgt_texts, *golden, tgt_units=options.tgt_units,
                                            batch_size=batch_size), plot, len(pairs))
        return
    links: list[set[tuple[int, int]]] = []
    with _Progress("sentences aligned", total=len(pairs), enabled=progress) as bar:
        for start in range(0, len(pairs), batch_size * 16):
            chunk = slice(start, start + batch_size * 16)
            links += [set(a.links) for a in translator.align(src_texts[chunk], tgt_texts[chunk], options=options,
                                                            batch_size=batch_size)]
            bar.advance(len(src_texts[chunk]))
    from heed.explain.forced import attention_shape

    what = options.describe(attention_shape(translator.model)[:2])
    if reverse is not None:
        from heed.explain.align_methods import symmetrize as join

        backward = Translator.load(reverse, device=device).align(
            tgt_texts, src_texts, options=AlignOptions(method=options.method), batch_size=batch_size)
        links = [join(f, {(i, j) for j, i in b.links}, symmetrize.value) for f, b in zip(links, backward)]
        what += f", {symmetrize.value} with {reverse}"
    lines = [_pharaoh_line(link_set) + "\n" for link_set in links]
    if output is None:
        sys.stdout.writelines(lines)
        sys.stdout.flush()
    else:
        with atomic_open(output) as sink:
            sink.writelines(lines)
    others = [] if theirs is None else [(str(reference), theirs)]
    if other is not None:
        besides = [set(a.links) for a in other.align(src_texts, tgt_texts, options=options, batch_size=batch_size)]
        others.append((f"{beside} (--beside)", besides))
        gap = translator.attention_gap(other, src_texts, tgt_texts, batch_size=batch_size)
        changed = sum(len(a ^ b) for a, b in zip(links, besides))
        typer.echo(f"beside {beside}: {gap.summary()}; {changed:,} links of {sum(map(len, links)):,} differ "
                   f"(either side)", err=output is None)
    if golden is not None:
        _print_aer(links, golden, units, what, others, err=output is None)


class AttributeMethod(str, enum.Enum):
    integrated_gradients = "integrated_gradients"
    grad_x_input = "grad_x_input"


MAX_ATTRIBUTION_PLOTS = 8


@app.command()
@friendly_errors
def attribute(
    model: Path = typer.Argument(..., help="Model directory (or a training output directory); not an export."),
    src: Path = typer.Option(..., "--src", help="Source sentences, one per line."),
    tgt: Optional[Path] = typer.Option(None, "--tgt", help="Translations to explain, line-aligned with --src "
                                       "(default: the model's own translations)."),
    output: Path = typer.Option(Path("attribution.json"), "--output", "-o", help="The attributions, as JSON."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw attention beside attribution (.png, .svg, "
                                        f".pdf) for the first {MAX_ATTRIBUTION_PLOTS} sentences."),
    method: AttributeMethod = typer.Option(AttributeMethod.integrated_gradients, "--method",
                                           help="integrated_gradients (complete; --steps points) or grad_x_input."),
    steps: int = typer.Option(50, "--steps", min=1, max=MAX_ATTRIBUTION_STEPS,
                              help=f"Integrated gradients' integration points (1 to {MAX_ATTRIBUTION_STEPS})."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    progress: Optional[bool] = progress_option(),
) -> None:
    """Attribute every output token to the source tokens and the output before it (Captum:
    pip install 'heed-nmt[explain]'), and put it beside the attention.

    For each sentence the JSON holds the tokens, `source` (output x source attribution, </s> last on
    both axes), `prefix` (output x decoder input), `attention`, the log-probability each output
    token is given, integrated gradients' completeness gap `delta` (sum of attributions minus
    f(input) - f(zero embeddings)) and `agreement`: per output token, the Spearman rank correlation
    of its attention with the magnitude of its source attribution. Prints each sentence's mean
    agreement and largest completeness gap."""
    from heed.api import Translator

    if plot is not None:
        _check_figure_path(plot)
    if tgt is None:
        with open_stream(src) as stream:
            sources, targets = list(_read_lines(stream, str(src))), None
    else:
        from heed.data.corpus import read_parallel

        pairs = list(read_parallel(src, tgt, streams=True))
        sources, targets = [p.src for p in pairs], [p.tgt for p in pairs]
    for number, line in enumerate(sources, start=1):
        if not line.strip():
            raise HeedError(f"{src}: line {number} is empty: there is nothing to attribute to")
    translator = Translator.load(model, device=device)
    _warn_long_sources(translator, sources, str(src))
    results = []
    with _Progress("sentences attributed", total=len(sources), enabled=progress) as bar:
        for k, source in enumerate(sources):
            results += translator.attribute([source], None if targets is None else [targets[k]], method=method.value,
                                            steps=steps)
            bar.advance(1)
    import json

    with atomic_open(output) as sink:
        json.dump([r.to_dict() for r in results], sink, ensure_ascii=False)
        sink.write("\n")
    for number, r in enumerate(results, start=1):
        agreement = r.agreement()
        mean = "-" if agreement is None else f"{agreement.mean():+.2f}"
        gap = "" if r.delta is None else f"\tmax |delta| {abs(r.delta).max():.1e}"
        typer.echo(f"{number}\t{' '.join(r.tgt_tokens)}\tagreement {mean}{gap}")
    typer.echo(f"attributions: {output}")
    if plot is not None:
        import numpy as np

        from heed.viz import attention_grid, save_figure

        items, titles = [], []
        for number, r in enumerate(results[:MAX_ATTRIBUTION_PLOTS], start=1):
            labels = ([*r.src_tokens, "</s>"], [*r.tgt_tokens, "</s>"])
            magnitude = np.abs(r.source)
            shares = magnitude / np.maximum(magnitude.max(axis=1, keepdims=True), 1e-12)
            if r.attention is not None:
                items.append((*labels, r.attention))
                titles.append(f"{number}: attention")
            items.append((*labels, shares))
            titles.append(f"{number}: |{method.value}| (row max = 1)")
        figure = attention_grid(items, titles=titles, cols=2, label="attention weight; attribution / row's largest")
        typer.echo(f"figure: {save_figure(figure, plot)}")


@app.command("faithfulness")
@friendly_errors
@decode_options
def faithfulness_command(
    model: Path = typer.Argument(..., help="Model directory (or a training output directory); not an export."),
    src: Path = typer.Option(..., "--src", help="Source sentences, one per line."),
    ref: Path = typer.Option(..., "--ref", help="Reference translations, line-aligned with --src."),
    permute_seed: int = typer.Option(0, "--permute-seed", min=0, help="Seed of the permutations."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Also write the figures as JSON."),
    batch_size: int = typer.Option(64, "--batch-size", min=1),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    progress: Optional[bool] = progress_option(),
    *,
    decode: dict[str, Any],
) -> None:
    """Does attention explain the output? Replaces every attention over the source by uniform weights,
    by its own weights permuted, and with its top-weighted source token dropped, and reports for each
    the change in the probability of the model's own output tokens (teacher forced), the total
    variation distance between the output distributions, the BLEU of a new decoding against --ref,
    and the share of sentences whose output changed (Jain & Wallace 2019)."""
    from rich.table import Table

    from heed.api import Translator
    from heed.data.corpus import read_parallel
    from heed.explain.faithfulness import KINDS, faithfulness, passes

    pairs = list(read_parallel(src, ref, streams=True))
    translator = Translator.load(model, device=device)
    _warn_long_sources(translator, [p.src for p in pairs], str(src))
    cfg = resolve_decode(translator, decode)
    with _Progress("sentence passes (decoding, or reading as forced)", total=passes(len(pairs), KINDS),
                   enabled=progress) as bar:
        report = faithfulness(translator, [p.src for p in pairs], [p.tgt for p in pairs], decode=cfg,
                              seed=permute_seed, batch_size=batch_size, progress=bar.advance)
    table = Table(title=f"attention interventions: {report.sentences} sentences, {report.tokens} output tokens, "
                        f"permutation seed {permute_seed}; BLEU without: {report.bleu:.2f}")
    for column in ("intervention", "mean delta p(y)", "mean |delta p(y)|", "mean TVD", "BLEU", "outputs changed"):
        table.add_column(column, justify="left" if column == "intervention" else "right")
    for e in report.effects:
        table.add_row(e.kind, f"{e.prob_change:+.3f}", f"{e.abs_prob_change:.3f}", f"{e.tvd:.3f}", f"{e.bleu:.2f}",
                      f"{e.changed:.1f}%")
    _print_table(table)
    if output is not None:
        import json

        with atomic_open(output) as sink:
            json.dump(report.to_dict(), sink, indent=1)
            sink.write("\n")


def _pharaoh_line(links: set[tuple[int, int]]) -> str:
    """Links in target order (then source), as `heed align` always wrote them."""
    from heed.explain.align import to_pharaoh

    return to_pharaoh(sorted(links, key=lambda link: (link[1], link[0])))


def _print_aer(links: list[set], golden: tuple[list[set], list[set]], units: list[tuple[int, int]], what: str,
               others: Sequence[tuple[str, list[set]]], *, err: bool) -> None:
    """The model's AER, the diagonal's and the others' (a reference file's, a --beside model's:
    (what, links)), and a warning when the model does not beat the diagonal."""
    from heed.explain.align import alignment_error_rate
    from heed.explain.align_methods import diagonal_alignment

    sure, possible = golden
    aer = alignment_error_rate(links, sure, possible)
    diagonal = alignment_error_rate([set(diagonal_alignment(n_src, n_tgt)) for n_src, n_tgt in units], sure, possible)
    typer.echo(f"AER = {aer:.4f}   ({len(links)} sentences; {sum(map(len, links))} links against "
               f"{sum(map(len, sure))} sure and {sum(len(p | s) for p, s in zip(possible, sure))} possible; {what})",
               err=err)
    typer.echo(f"AER = {diagonal:.4f}   the diagonal baseline (target unit j -> source word round(j*|src|/|tgt|))",
               err=err)
    for name, theirs in others:
        typer.echo(f"AER = {alignment_error_rate(theirs, sure, possible):.4f}   {name}", err=err)
    if aer >= diagonal:
        typer.echo("warning: this reading of the attention does not beat the diagonal baseline; try --method shift, "
                   "another --layer/--head, or --sweep to score them all", err=True)


def _print_sweep(result: Any, plot: Path, sentences: int) -> None:
    """`heed align --sweep`: one AER table per method (layers x heads and their means), the best
    reading, the diagonal, and the heatmap."""
    from rich.table import Table

    from heed.explain.align_methods import METHODS, AlignOptions
    from heed.viz import aer_grid, save_figure

    console = Console(highlight=False, soft_wrap=True)
    grids = {method: result.grid(method) for method in METHODS}
    one = result.layers == result.heads == 1
    for method, grid in grids.items():
        name = "shift-att" if method == "shift" else method
        if one:  # an RNN's one attention: nothing to tabulate
            console.print(f"{name}: AER = {grid[0, 0]:.4f}   ({sentences} sentences)")
            continue
        table = Table(title=f"AER % by decoder layer x head ({name}; {sentences} sentences)")
        table.add_column("layer")
        for h in range(result.heads):
            table.add_column(f"head {h}", justify="right")
        table.add_column("mean", justify="right")
        for r in range(result.layers + 1):
            table.add_row("mean" if r == result.layers else str(r), *(f"{100 * v:.1f}" for v in grid[r]))
        console.print(table)
    if not one:
        best, best_aer = result.best()
        console.print(f"best: AER = {best_aer:.4f}   {best.describe()}")
        console.print(f"default: AER = {result.aer(AlignOptions()):.4f}   argmax, the alignment layer "
                      f"(the layer heed aligns with unless told: layer {result.default_layer}, the last decoder "
                      "layer), mean of heads")
    console.print(f"diagonal baseline: AER = {result.diagonal.aer:.4f}")
    if one:
        console.print("(one attention: no layer x head heatmap drawn)")
        return
    save_figure(aer_grid(grids, diagonal=result.diagonal.aer), plot)
    console.print(f"heatmap: {plot}")


# ----------------------------------------------------------------------------------- compare


@app.command()
@friendly_errors
@decode_options
def compare(
    models: List[Path] = typer.Argument(..., help="Model directories (or training output directories) to compare."),
    src: Path = typer.Option(..., "--src", help="Source sentences, one per line."),
    ref: Path = typer.Option(..., "--ref", help="Reference translations, line-aligned with --src."),
    names: Optional[str] = typer.Option(None, "--names", metavar="A,B,...",
                                        help="One name per model for the table and plot (default: directory names)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Draw the models' scores by length on one figure: "
                                        ".png, .svg or .pdf."),
    plot_metric: PlotMetric = typer.Option(PlotMetric.bleu, "--plot-metric", help=PLOT_METRIC_HELP),
    buckets: Optional[str] = typer.Option(None, "--buckets", metavar="RANGES", help=BUCKETS_HELP.replace(
        "; implies --by-length", "")),
    length_unit: LengthUnit = typer.Option(LengthUnit.words, "--length-unit", help=(
        "What source length counts: whitespace words, characters, or tokens (the first model's "
        "source tokenizer).")),
    batch_size: int = typer.Option(64, "--batch-size", min=1),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    *,
    decode: dict[str, Any],
) -> None:
    """Translate the same test set with several models and compare them: BLEU, chrF and exact match
    per model, then scores by source length side by side (and, with --plot, one line per model):
    the figure where attention holds up on long sentences and a plain encoder-decoder falls away.

    The decode flags apply to every model; what they leave out comes from each model's own decode
    config."""
    from rich.table import Table

    from heed.api import Translator
    from heed.data.corpus import read_parallel
    from heed.evaluate import evaluate as score

    labels = _model_names(models, names)
    bucket_list = _parse_buckets(buckets)
    _check_figure_path(plot)
    pairs = list(read_parallel(src, ref, streams=True))
    srcs, refs = [p.src for p in pairs], [p.tgt for p in pairs]
    outputs: dict[str, list[str]] = {}
    first_model: list[Translation] = []  # its source tokens are what --length-unit tokens counts
    for label, path in zip(labels, models):
        translator = Translator.load(path, device=device)
        cfg = resolve_decode(translator, decode, label=label)
        with _Progress(f"{label}: translating", total=len(srcs)) as progress:
            translations = [nbest[0] for chunk in _translate_chunks(translator, srcs, name=f"{src} ({label})",
                                                                    chunk_size=batch_size * 16, progress=progress,
                                                                    decode=cfg, batch_size=batch_size)
                            for nbest in chunk]
        outputs[label] = [t.text for t in translations]
        first_model = first_model or translations

    overall = {label: score(hyps, refs) for label, hyps in outputs.items()}
    table = Table(title=f"{len(pairs)} sentences of {src}", title_justify="left", box=None, pad_edge=False)
    for column in ("model", "BLEU", "chrF", "exact match"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for label, s in overall.items():
        table.add_row(label, f"{s.bleu:.2f}", f"{s.chrf:.2f}", f"{s.exact_match:.1f}% ({s.exact}/{s.total})")
    _print_table(table)
    some = next(iter(overall.values()))
    typer.echo(f"BLEU: {some.bleu_signature}\nchrF: {some.chrf_signature}")
    results = _scores_by_length(srcs, outputs, refs, bucket_list, length_unit.value, first_model)
    _show_by_length(results, length_unit.value, len(pairs), plot, plot_metric.value)


def _model_names(models: Sequence[Path], names: Optional[str]) -> list[str]:
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


# ------------------------------------------------------------------------------------- serve


@app.command()
@friendly_errors
def serve(
    models: Optional[List[Path]] = typer.Argument(None, help="Model directories (or training output directories, "
                                                  "or `heed export` directories) to serve."),
    names: Optional[str] = typer.Option(None, "--names", metavar="A,B,...",
                                        help="One name per model for the API (default: directory names)."),
    ensembles: List[str] = typer.Option([], "--ensemble", metavar="NAME=DIR,DIR[,...]",
                                        help="Also serve an ensemble of these models under NAME: each step decodes "
                                             "with the mean of their log-probabilities (as `heed translate A B`); "
                                             "they must share tokenizers and vocabularies (repeatable)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on; 0.0.0.0 opens the server to "
                             "the network (it has no authentication)."),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port (0: any free one)."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help=THREADS_HELP),
    bf16: bool = typer.Option(False, "--bf16", help=BF16_HELP),
    max_sentences: int = typer.Option(64, "--max-sentences", min=1, help="Sentences per request at most."),
    max_chars: int = typer.Option(1000, "--max-chars", min=1, help="Characters per sentence at most."),
    max_body: int = typer.Option(1 << 20, "--max-body", min=1024, help="Request body bytes at most."),
    max_queue: int = typer.Option(1024, "--max-queue", min=1,
                                  help="Sentences waiting for the decoder at most; past it requests get 503 "
                                       "with Retry-After."),
    timeout: float = typer.Option(30.0, "--timeout", min=0.001, help="Seconds a request may take, waiting "
                                  "included; past it, 504."),
    batch_wait_ms: float = typer.Option(5.0, "--batch-wait-ms", min=0.0,
                                        help="How long to gather concurrent requests into one batch."),
    batch_sentences: int = typer.Option(64, "--batch-sentences", min=1, help="Sentences of one batch at most."),
    batching: bool = typer.Option(True, "--batching/--no-batching",
                                  help="Decode concurrent requests together (off: one request at a time)."),
    max_beam: int = typer.Option(64, "--max-beam", min=1, help="Beam size (and samples per sentence) at most."),
    max_output: int = typer.Option(1024, "--max-output", min=1,
                                   help="Output tokens a request may allow a sentence at most: floor(max_len_a * "
                                        "the model's max_src_len + max_len_b), and a forced prefix's tokens."),
    max_work: int = typer.Option(1 << 18, "--max-work", min=1,
                                 help="Decoder rows x steps a request may ask for at most: per sentence, the beam "
                                      "(or samples) times its longest output. Keeps one costly request from "
                                      "holding the decoder while other clients wait."),
    max_weights: int = typer.Option(1 << 21, "--max-weights", min=1,
                                    help="Attention weights a /v1/heads request may ask for at most: layers x heads "
                                         "x (target x source, plus source x source and target x target for the "
                                         "self-attention parts asked), summed over its sentences."),
    slice_work: int = typer.Option(1 << 12, "--slice-work", min=1,
                                   help="Decoder rows x steps a request is given per turn of the decoder: a "
                                        "costlier request is decoded a slice at a time, with other requests' "
                                        "batches between its slices, so it delays them by a slice, not by "
                                        "itself (/v1/heads and /v1/attribute: a sentence a turn)."),
    read_timeout: float = typer.Option(10.0, "--read-timeout", min=0.001,
                                       help="Seconds a client may take to send a whole request (headers and body); "
                                            "a slower one is disconnected."),
    log_level: str = typer.Option("info", "--log-level", help="uvicorn's log level: debug, info, warning, error."),
) -> None:
    """Serve models over HTTP: a JSON API (POST /v1/translate, /v1/align; GET /v1/models, /health; the
    OpenAPI page at /docs) and the attention explorer at /.

    Several models load at once, each under its name, so the explorer can put them side by side.
    Concurrent requests are decoded together (dynamic batching); a request breaking a limit gets a JSON
    error naming the field. Needs the serve extra: pip install 'heed-nmt[serve]'."""
    try:
        import uvicorn

        from heed.serve.app import ServeSettings, create_app, last_metrics
    except ImportError as e:
        raise HeedError(f"heed serve needs FastAPI and uvicorn ({e.name} is missing): {install_hint('serve')}") \
            from None
    from heed.api import Translator
    from heed.checkpoint import find_model_dir
    from heed.export.onnx import exported_dir
    from heed.plumbing.runtime import torch_threads
    from heed.serve.slow_clients import read_timeout_protocol

    models = list(models or [])
    groups = _ensembles(ensembles)
    if not models and not groups:
        raise HeedError("give a model directory to serve (or --ensemble NAME=DIR,DIR)")
    labels = _model_names(models, names) if models else []
    clash = sorted(set(labels) & set(groups))
    if clash:
        raise HeedError(f"--ensemble {clash[0]}: a model is served under that name already; give the ensemble "
                        "another name")
    _check_host(host, port)
    if host not in ("127.0.0.1", "localhost", "::1"):
        _stderr().print(f"[yellow]warning:[/] listening on {_escape(host)}: anyone who can reach this machine can "
                        "use the server (it has no authentication); put it behind a proxy you trust",
                        soft_wrap=True)
    settings = ServeSettings(max_sentences=max_sentences, max_chars=max_chars, max_body=max_body,
                             max_queue=max_queue, timeout=timeout, batch_wait_ms=batch_wait_ms,
                             batch_sentences=batch_sentences, batching=batching, max_beam=max_beam,
                             max_output=max_output, max_work=max_work, max_weights=max_weights,
                             slice_work=slice_work, read_timeout=read_timeout)
    with torch_threads(threads):
        translators = {label: Translator.load(path, device=device, bf16=bf16) for label, path in zip(labels, models)}
        metrics = {label: last_metrics(exported_dir(path) or find_model_dir(path))
                   for label, path in zip(labels, models)}
        for name, members in groups.items():
            translators[name] = Translator.load(members, device=device, bf16=bf16)
            metrics[name] = None
        app_ = create_app(translators, settings, metrics=metrics)
        uvicorn.run(app_, host=host, port=port, log_level=log_level, http=read_timeout_protocol(read_timeout))


def _ensembles(specs: Sequence[str]) -> dict[str, list[Path]]:
    """--ensemble NAME=DIR,DIR,... -> {NAME: [DIR, ...]}; a HeedError naming the spec when malformed."""
    groups: dict[str, list[Path]] = {}
    for spec in specs:
        name, sep, paths = spec.partition("=")
        members = [Path(p.strip()) for p in paths.split(",") if p.strip()]
        if not sep or not name.strip() or len(members) < 2:
            raise HeedError(f"--ensemble {spec!r}: write NAME=DIR,DIR (a name, then two or more model directories)")
        if name.strip() in groups:
            raise HeedError(f"--ensemble {name.strip()}: given twice; give each ensemble its own name")
        groups[name.strip()] = members
    return groups


def _check_host(host: str, port: int) -> None:
    """A HeedError naming --host when it is no address this machine can listen on (uvicorn would
    print "Name or service not known" without saying which name)."""
    import socket

    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as e:
        raise HeedError(f"--host {host}: not an address or host name this machine can listen on ({e})") from None


# ----------------------------------------------------------------------------------- average


@app.command()
@friendly_errors
def average(
    checkpoints: List[Path] = typer.Argument(..., metavar="CHECKPOINT...",
                                             help="Two or more checkpoint directories (runs/x/checkpoints/last, "
                                                  "best) or model directories of one architecture."),
    output: Path = typer.Option(..., "--output", "-o", help="The model directory to write (replaced if it holds "
                                "an earlier model directory)."),
) -> None:
    """Average checkpoints of one model into one model directory: each weight is the elementwise mean
    of the checkpoints' (in float64, stored in the original dtype). Checkpoints a few evaluations
    apart in one training run average well; independently trained models do not (translate with
    them as an ensemble instead: heed translate A B). The inputs must share the architecture
    (model: config) and the tokenizers and vocabularies; the output has the first's config and
    lists the inputs in its heed.json."""
    from heed.train.average import average_checkpoints

    def warn(message: str) -> None:
        _stderr().print(f"[yellow]warning:[/] {_escape(message)}", soft_wrap=True)

    out = average_checkpoints(checkpoints, output, warn=warn)
    typer.echo(f"averaged {len(checkpoints)} checkpoints -> {out}")


# -------------------------------------------------------------------------------------- data

data_app = typer.Typer(name="data", help="The recipes' corpora: list them, or download one (checked by sha256); "
                       "or write a generated task with its gold alignments.",
                       no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                       rich_markup_mode=None)
app.add_typer(data_app)


@data_app.command("list")
@friendly_errors
def data_list() -> None:
    """The datasets `heed data get` downloads: the files, their size, where they go, the license."""
    from heed.data.download import DATASETS

    for name, dataset in DATASETS.items():
        typer.echo(f"{name}: {', '.join(dataset.file_names)}")
        typer.echo(f"  {dataset.size}; `heed data get {name} [DIR]` writes DIR/{name}/ (default data/{name}/)")
        typer.echo(f"  license: {dataset.license}")


@data_app.command("get")
@friendly_errors
def data_get(
    name: str = typer.Argument(..., metavar="NAME", help="multi30k or tatoeba-fra-eng (heed data list)."),
    directory: Path = typer.Argument(Path("data"), metavar="DIR", help="Where to write DIR/NAME/ (default: data, "
                                     "the folder the recipes in configs/ read)."),
    mirror: Optional[str] = typer.Option(None, "--mirror", metavar="URL", help="Fetch the same paths from this "
                                         "host instead of the official one (a mirror you trust)."),
    any_release: bool = typer.Option(False, "--any-release", help="Take a source that publishes one moving "
                                     "release (Tatoeba) as it is now, when it is no longer the release heed pins."),
) -> None:
    """Download a recipe's corpus from its official source into DIR/NAME/, each file checked against
    the sha256 heed pins, with SOURCE.md (where from, sha256, license, what to cite). Files already
    there with the right sha256 are kept; an interrupted or corrupt download writes nothing."""
    from heed.data.download import DATASETS, get

    if mirror is not None and _scheme(mirror) not in ("http", "https"):
        raise HeedError(f"--mirror {mirror}: give an http:// or https:// URL")
    with _Progress("bytes downloaded", enabled=True) as bar:  # lines in a log too: a download can be slow
        last = {"name": "", "seen": 0}

        def progress(file: str, seen: int, total: Optional[int]) -> None:
            if file != last["name"]:
                last.update(name=file, seen=0)
            bar.advance(seen - last["seen"])
            last["seen"] = seen

        got = get(name, directory, mirror=mirror, any_release=any_release, progress=progress)
    dataset = DATASETS[name]
    if got.off_release:
        typer.echo(f"{name} -> {got.folder} ({', '.join(got.off_release)}: not the pinned release, taken as it is "
                   "with --any-release and checked against nothing; the rest sha256 checked; SOURCE.md says "
                   "where from)")
    else:
        typer.echo(f"{name} -> {got.folder} (sha256 checked; SOURCE.md says where from)")
    typer.echo(f"license: {dataset.license}")
    typer.echo(f"cite: {dataset.citation(off_release=bool(got.off_release))}")


@data_app.command("task")
@friendly_errors
def data_task(
    name: str = typer.Argument(..., metavar="TASK", help="dates or names: a generated task."),
    directory: Path = typer.Argument(..., metavar="DIR", help="Where to write its files."),
    config: Optional[Path] = typer.Option(None, "--config", help="A config whose data.dates / data.names "
                                          "settings to use (sizes, seed, languages); default: the defaults."),
) -> None:
    """Write a generated task to DIR: {train,dev,test}.src and .tgt, and {train,dev,test}.align, its gold
    alignments by construction (Pharaoh: i-j sure, i?j possible). The dates task's gold links source
    words to target characters (score it with `heed align --tgt-units chars`), the names task's words
    to words. The same settings write the same files as training generates: give the model's training
    config (--config) so that test is the model's held-out test set."""
    from heed.config import DataConfig, load_config
    from heed.data.codec import write_task

    if name not in ("dates", "names"):
        raise HeedError(f"TASK must be dates or names, got {name!r}")
    data = DataConfig(task=name) if config is None else load_config(config).data.model_copy(update={"task": name})
    written = write_task(data, directory)
    counts = {split: sum(1 for _ in open(written[f"{split}.src"], encoding="utf-8")) for split in ("train", "dev", "test")}
    typer.echo(f"{name}: {counts['train']:,} train / {counts['dev']:,} dev / {counts['test']:,} test pairs -> {directory} "
               f"({', '.join(sorted(written))})")
    units = "--tgt-units chars " if name == "dates" else ""
    typer.echo(f"score a model's alignments: heed align MODEL --src {directory / 'test.src'} --tgt {directory / 'test.tgt'} "
               f"{units}--gold {directory / 'test.align'}")


def _scheme(url: str) -> str:
    from urllib.parse import urlsplit

    return urlsplit(url).scheme


# ------------------------------------------------------------------------------------ config


@app.command("config")
@friendly_errors
def config_command() -> None:
    """Print the configuration reference: every config field with its type, default, limits and
    description (Markdown; the same text as docs/config.md)."""
    from heed.config_reference import reference

    typer.echo(reference(), nl=False)


# ------------------------------------------------------------------------------------ export


@app.command("export")
@friendly_errors
def export_command(
    model: Path = typer.Argument(..., help="Model directory (or a training output directory)."),
    output: Path = typer.Option(..., "--output", "-o", help="The exported directory to write (replaced if it "
                                "holds an earlier export)."),
    int8: bool = typer.Option(False, "--int8", help="Store the weights in 8 bits (ONNX Runtime's dynamic "
                              "quantization, or CTranslate2's int8): smaller and faster on the CPU, slightly "
                              "less accurate. On an x86 CPU without VNNI, where int8 products saturate, a "
                              "CTranslate2 export multiplies in int16."),
    export_format: str = typer.Option("onnx", "--format", help="onnx: an encoder graph and a decoder-step graph "
                                      "that heed's own search runs with ONNX Runtime (any model; the explorer, "
                                      "alignments and every decode option work). ctranslate2: a Transformer as a "
                                      "CTranslate2 model, translated by CTranslate2's C++ search (the fastest on "
                                      "the CPU; translate, evaluate and serve, not the explorer's beam tree or "
                                      "alignments; needs heed-nmt[ct2]). Its greedy output and best beam "
                                      "hypothesis are heed's; below the best, an n-best list is CTranslate2's "
                                      "search's, which can miss a hypothesis heed's finds (most often a short "
                                      "one) and show the next instead."),
) -> None:
    """Export a model for deployment: the model for a runtime (ONNX graphs, or CTranslate2's model
    with --format ctranslate2), the tokenizers and vocabularies, and a manifest (heed version, model
    config, sha256 of every file). `heed translate`, `heed evaluate`, `heed serve` and `heed.load`
    take the exported directory and run it on the CPU. Needs `pip install 'heed-nmt[onnx]'`
    (or '[ct2]')."""
    from heed.export.onnx import export_model

    out = export_model(model, output, int8=int8, kind=export_format)
    typer.echo(f"exported {model} -> {out} ({export_format}{', int8' if int8 else ''})")


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
        # soft_wrap: a log off a terminal keeps each line whole (rich would wrap at 80 columns).
        run_demo(output_dir=output_dir, quick=quick, overrides=list(set_),
                 console=Console(highlight=False, soft_wrap=True), progress=progress)
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
