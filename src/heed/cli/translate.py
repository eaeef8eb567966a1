"""`heed translate`, `evaluate` and `compare`: sentences in, translations and scores out."""
from __future__ import annotations

import contextlib
import enum
import io
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import typer

from heed.cli.app import ENSEMBLE_HELP, THREADS_HELP, friendly_errors, language_options, with_pair
from heed.cli.decode_flags import (
    BF16_HELP,
    DICTIONARY_HELP,
    INT8_HELP,
    REPLACE_UNK_HELP,
    decode_options,
    resolve_decode,
)
from heed.cli.io import check_figure_path, chunks, model_names, print_table, read_lines, truncation_message
from heed.cli.progress import Progress, progress_option
from heed.errors import HeedError
from heed.plumbing.files import atomic_open, open_stream

if TYPE_CHECKING:
    from heed.api import Translation, Translator
    from heed.decode_config import DecodeConfig
    from heed.evaluate import Bucket, BucketScore
    from heed.evaluate import LengthUnit as UnitName






def _translate_chunks(translator: Translator, lines: Iterable[str], *, name: str, chunk_size: int,
                      progress: Progress, decode: DecodeConfig, batch_size: int, replace_unk: bool = False,
                      dictionary: dict[str, str] | None = None,
                      sources: list[str] | None = None) -> Iterator[list[list[Translation]]]:
    """`translator.translate_nbest(chunk, decode=decode, ...)` (per line, its n-best list, best
    first) for each `chunk_size` lines, advancing `progress` and warning about sources cut to the
    model's max_src_len by their line numbers in `name`; `sources` (a list) is set to each chunk's
    lines before it is yielded."""
    first = 1
    for chunk in chunks(iter(lines), chunk_size):
        # attention only for --replace-unk (which asks for it itself): what the lines need
        translations = translator.translate_nbest(chunk, decode=decode, batch_size=batch_size,
                                                  replace_unk=replace_unk, dictionary=dictionary, attention=False)
        cut = [first + k for k, nbest in enumerate(translations) if nbest[0].truncated]
        if cut:
            progress.warn(truncation_message(cut, name, translator.max_src_len))
        progress.advance(len(chunk))
        first += len(chunk)
        if sources is not None:
            sources[:] = chunk
        yield translations


def nbest_lines(first_id: int, chunk: Sequence[list[Translation]],
                shares: Sequence[list[str]] | None = None) -> Iterator[str]:
    """Moses-style n-best lines, `SENT_ID ||| text ||| score`, best first for each source; SENT_ID
    counts sources from 0, `first_id` being `chunk[0]`'s; with `shares` (per source, per hypothesis)
    a fourth field `source_share=S`."""
    for k, nbest in enumerate(chunk):
        for n, t in enumerate(nbest):
            share = "" if shares is None else f" ||| source_share={shares[k][n]}"
            yield f"{first_id + k} ||| {t.text} ||| {round(t.score, 4) + 0.0:.4f}{share}\n"  # + 0.0: no "-0.0000"


class Explain(str, enum.Enum):
    source_share = "source-share"


class TextFormat(str, enum.Enum):
    text = "text"
    html = "html"
    xml = "xml"
    srt = "srt"
    vtt = "vtt"


FORMAT_HELP = ("text: a sentence a line. html or xml: a fragment a line, translated a block at a time with its "
               "inline tags (b, i, a, span, br, ...) carried across by the model's alignment, as heed markup does; "
               "code, script, style and translate=\"no\" stay as they are. srt or vtt: a whole subtitle file; a "
               "sentence that runs over several cues is translated as one and split back over the same cues by the "
               "alignment; cue numbers and timings are kept.")
SUBTITLES = (TextFormat.srt, TextFormat.vtt)


EXPLAIN_HELP = ("source-share: after each translation, a tab and its ALTI+ source share (0 to 1, 4 decimals; "
                "with --n-best a fourth field source_share=S): how much of its tokens' predictions came from the "
                "source rather than from the output so far (Ferrando et al. 2022). A low share flags output the "
                "source did not drive, as hallucinations are (Xu et al. 2023). '-' for an empty line. One "
                "Transformer model directory; one more teacher-forced pass per output.")


def source_share_fields(translator: Translator, sources: Sequence[str],
                        chunk: Sequence[list[Translation]]) -> list[list[str]]:
    """Each hypothesis's sentence source share as printed (4 decimals), per source; '-' for an
    empty source (nothing to share)."""
    from heed.explain.source_share import nbest_source_shares

    return [["-" if share is None else f"{share.sentence:.4f}" for share in shares]
            for shares in nbest_source_shares(*translator.subject, sources, chunk, max_src_len=translator.max_src_len)]


@friendly_errors
@decode_options
@language_options
def translate(
    models: list[Path] = typer.Argument(..., metavar="MODEL...", help=ENSEMBLE_HELP),
    input: Path | None = typer.Option(None, "--input", "-i", help="Source sentences, one per line (default: stdin)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Where to write translations (default: stdout)."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Sentences per batch."),
    replace_unk: bool = typer.Option(False, "--replace-unk", help=REPLACE_UNK_HELP),
    dictionary: Path | None = typer.Option(None, "--dictionary", help=DICTIONARY_HELP),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    progress: bool | None = progress_option(),
    threads: int | None = typer.Option(None, "--threads", min=1, help=THREADS_HELP),
    bf16: bool = typer.Option(False, "--bf16", help=BF16_HELP),
    int8: bool = typer.Option(False, "--int8", help=INT8_HELP),
    explain: Explain | None = typer.Option(None, "--explain", help=EXPLAIN_HELP),
    text_format: TextFormat = typer.Option(TextFormat.text, "--format", help=FORMAT_HELP),
    aligner: str = typer.Option("model", "--aligner", help="With --format html|xml: whose links place the tags, "
                                "model, priors or both (as heed markup --aligner); the first MODEL's priors."),
    priors_file: Path | None = typer.Option(None, "--priors", metavar="FILE", help="With --aligner priors/both: "
                                               "this priors file instead of the model's recorded one."),
    cue_width: int = typer.Option(42, "--cue-width", min=10, max=200, help="With --format srt|vtt: characters a "
                                  "subtitle line, re-wrapped at spaces."),
    cue_lines: int = typer.Option(2, "--cue-lines", min=1, max=10, help="With --format srt|vtt: lines a cue."),
    *,
    decode: dict[str, Any],
    languages: dict[str, Any],
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
    translator = Translator.load(models, device=device, bf16=bf16, int8=int8, **languages)
    cfg = resolve_decode(translator, decode)  # before reading: a bad flag fails before any input is typed
    _check_combination(translator, cfg, explain=explain is not None, text_format=text_format,
                       replace_unk=replace_unk, aligner=aligner)
    from heed.cli.markup import chosen_priors

    priors = chosen_priors(translator, models[0], aligner, priors_file)
    name = str(input) if input is not None else "<stdin>"
    interactive = input is None and sys.stdin.isatty()
    chunk_size = 1 if interactive else batch_size * 16
    # Translations streaming to a terminal are their own progress; a bar would tangle with them.
    streaming = interactive or (output is None and sys.stdout.isatty())
    show_progress = progress if progress is not None else (False if streaming else None)

    def run(source: Any, sink: IO[str]) -> None:
        if text_format in SUBTITLES:
            return _write_subtitles(translator, source, sink, name=name, kind=text_format.value, cfg=cfg,
                                    width=cue_width, lines=cue_lines)
        if text_format is not TextFormat.text:
            return _write_marked(translator, source, sink, name=name, kind=text_format.value, cfg=cfg,
                                 chunk_size=chunk_size, progress=show_progress, aligner=aligner, priors=priors)
        _write_plain(translator, source, sink, name=name, cfg=cfg, chunk_size=chunk_size, progress=show_progress,
                     batch_size=batch_size, replace_unk=replace_unk, table=table, explain=explain is not None)

    with torch_threads(threads), (open_stream(input) if input is not None else _stdin_bytes()) as source:
        if output is None:
            run(source, sys.stdout)
        else:
            with atomic_open(output) as sink:
                run(source, sink)


def _check_combination(translator: Any, cfg: Any, *, explain: bool, text_format: TextFormat, replace_unk: bool,
                       aligner: str) -> None:
    """A HeedError for flags that cannot go together on this model."""
    if explain:
        from heed.nn.protocol import ContributionModel

        if not isinstance(translator.model, ContributionModel):
            raise HeedError("--explain source-share reads every attention block of one Transformer model directory "
                            "(not an RNN, an ensemble or an export)")
    if text_format is not TextFormat.text and (cfg.n_best > 1 or explain or replace_unk):
        raise HeedError(f"--format {text_format.value} writes one fragment a line: not with --n-best, --explain or "
                        "--replace-unk")
    if aligner != "model" and text_format not in (TextFormat.html, TextFormat.xml):
        raise HeedError("--aligner places markup: give it with --format html or xml")


def _write_plain(translator: Any, source: Any, sink: IO[str], *, name: str, cfg: Any, chunk_size: int,
                 progress: bool | None, batch_size: int, replace_unk: bool, table: Any, explain: bool) -> None:
    """`heed translate`'s lines: the best translation of each, its n-best, or with its source share."""
    first_id = 0
    lines: list[str] = []
    with Progress("lines translated", enabled=progress) as bar:
        for chunk in _translate_chunks(translator, read_lines(source, name), name=name, chunk_size=chunk_size,
                                       progress=bar, decode=cfg, batch_size=batch_size,
                                       replace_unk=replace_unk, dictionary=table, sources=lines):
            shares = source_share_fields(translator, lines, chunk) if explain else None
            if cfg.n_best > 1:
                sink.writelines(nbest_lines(first_id, chunk, shares))
            elif shares is None:
                sink.writelines(nbest[0].text + "\n" for nbest in chunk)
            else:
                sink.writelines(f"{nbest[0].text}\t{share[0]}\n" for nbest, share in zip(chunk, shares))
            sink.flush()
            first_id += len(chunk)


def _write_subtitles(translator: Any, source: Any, sink: IO[str], *, name: str, kind: str, cfg: Any, width: int,
                     lines: int) -> None:
    """A whole SRT or WebVTT input translated cue by cue (heed.markup.subtitles)."""
    from heed.markup.cues import decode as decode_subtitles
    from heed.markup.subtitles import Layout, translate_subtitles

    text = decode_subtitles(source.read(), name)
    sink.write(translate_subtitles(translator, text, kind, path=name, decode=cfg,  # type: ignore[arg-type]
                                   layout=Layout(width=width, max_lines=lines)))


def _write_marked(translator: Any, source: Any, sink: IO[str], *, name: str, kind: str, cfg: Any, chunk_size: int,
                  progress: bool | None, aligner: str, priors: Any) -> None:
    """A fragment of HTML or XML a line, translated with its markup carried across (heed.markup)."""
    from heed.cli.markup import carried, parse_lines

    first = 1
    with Progress("lines translated", enabled=progress) as bar:
        for lines in chunks(read_lines(source, name), chunk_size):
            documents = parse_lines(lines, name, kind, first=first)
            sink.writelines(line + "\n" for line in carried(translator, documents, None, cfg, bar,
                                                               aligner=aligner, priors=priors))
            sink.flush()
            first += len(lines)


def _stdin_bytes() -> Any:
    """stdin as bytes, in a context that leaves it open."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text-only stdin (some embeddings)
        return contextlib.nullcontext(io.BytesIO(sys.stdin.read().encode("utf-8")))
    return contextlib.nullcontext(buffer)


class LengthUnit(str, enum.Enum):
    _value_: UnitName

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


@friendly_errors
@decode_options
@language_options
def evaluate(
    models: list[Path] = typer.Argument(..., metavar="MODEL...", help=ENSEMBLE_HELP),
    src: Path = typer.Option(..., "--src", help="Source sentences, one per line."),
    ref: Path = typer.Option(..., "--ref", help="Reference translations, line-aligned with --src."),
    batch_size: int = typer.Option(64, "--batch-size", min=1),
    hyps: Path | None = typer.Option(None, "--hyps", help="Also write the translations here."),
    replace_unk: bool = typer.Option(False, "--replace-unk", help=REPLACE_UNK_HELP),
    dictionary: Path | None = typer.Option(None, "--dictionary", help=DICTIONARY_HELP),
    by_length: bool = typer.Option(False, "--by-length", help="Also score each source-length bucket: a table "
                                   "of sentences, BLEU, chrF and exact match per bucket."),
    buckets: str | None = typer.Option(None, "--buckets", metavar="RANGES", help=BUCKETS_HELP),
    length_unit: LengthUnit | None = typer.Option(None, "--length-unit", help=LENGTH_UNIT_HELP),
    plot: Path | None = typer.Option(None, "--plot", help=PLOT_HELP),
    plot_metric: PlotMetric = typer.Option(PlotMetric.bleu, "--plot-metric", help=PLOT_METRIC_HELP),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    progress: bool | None = progress_option(),
    threads: int | None = typer.Option(None, "--threads", min=1, help=THREADS_HELP),
    bf16: bool = typer.Option(False, "--bf16", help=BF16_HELP),
    int8: bool = typer.Option(False, "--int8", help=INT8_HELP),
    *,
    decode: dict[str, Any],
    languages: dict[str, Any],
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
    check_figure_path(plot)
    table = load_dictionary(dictionary) if dictionary is not None else None
    pairs = list(read_parallel(src, ref, streams=True))
    translator = Translator.load(models, device=device, bf16=bf16, int8=int8, **languages)
    cfg = resolve_decode(translator, decode)
    # In chunks, as `heed translate` does, so both give the same outputs for the same file.
    with torch_threads(threads), Progress("translating", total=len(pairs), enabled=progress) as bar:
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
        results = _scores_by_length([p.src for p in pairs], {" + ".join(model_names(models, None)): outputs},
                                    [p.tgt for p in pairs], bucket_list, unit, translations)
        _show_by_length(results, unit, len(pairs), plot, plot_metric.value)


def _parse_buckets(spec: str | None) -> list[Bucket] | None:
    from heed.evaluate import parse_buckets

    return None if spec is None else parse_buckets(spec)




def _scores_by_length(srcs: Sequence[str], outputs: dict[str, list[str]], refs: Sequence[str],
                      buckets: list[Bucket] | None, unit: UnitName,
                      translations: Sequence[Translation]) -> dict[str, list[BucketScore]]:
    """{model name: bucket scores}; every model's sentences fall in the same buckets. Token
    lengths are those of `translations`' source tokens (one model's tokenizer)."""
    from heed.evaluate import by_length, default_buckets, source_lengths

    lengths = [len(t.src_tokens) for t in translations] if unit == "tokens" else source_lengths(srcs, unit)
    buckets = buckets if buckets is not None else default_buckets(unit)
    return {name: by_length(srcs, hyps, refs, buckets, lengths=lengths) for name, hyps in outputs.items()}


def _show_by_length(results: dict[str, list[BucketScore]], unit: str, total: int, plot: Path | None,
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
    print_table(table)
    outside = total - sum(b.count for b in first)
    if outside:
        typer.echo(f"{outside} of {total} sentences fall in no bucket and are left out of this table")
    if plot is not None:
        from heed.viz import length_plot, save_figure

        series = {name: [(f"{b.label}\nn={b.count}", getattr(b, metric)) for b in rows]
                  for name, rows in results.items()}
        path = save_figure(length_plot(series, metric=METRIC_NAMES[metric], unit=unit), plot)
        typer.echo(f"plot: {path}")




@friendly_errors
@decode_options
@language_options
def compare(
    models: list[Path] = typer.Argument(..., help="Model directories (or training output directories) to compare."),
    src: Path = typer.Option(..., "--src", help="Source sentences, one per line."),
    ref: Path = typer.Option(..., "--ref", help="Reference translations, line-aligned with --src."),
    names: str | None = typer.Option(None, "--names", metavar="A,B,...",
                                        help="One name per model for the table and plot (default: directory names)."),
    plot: Path | None = typer.Option(None, "--plot", help="Draw the models' scores by length on one figure: "
                                        ".png, .svg or .pdf."),
    plot_metric: PlotMetric = typer.Option(PlotMetric.bleu, "--plot-metric", help=PLOT_METRIC_HELP),
    buckets: str | None = typer.Option(None, "--buckets", metavar="RANGES", help=BUCKETS_HELP.replace(
        "; implies --by-length", "")),
    length_unit: LengthUnit = typer.Option(LengthUnit.words, "--length-unit", help=(
        "What source length counts: whitespace words, characters, or tokens (the first model's "
        "source tokenizer).")),
    batch_size: int = typer.Option(64, "--batch-size", min=1),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    *,
    decode: dict[str, Any],
    languages: dict[str, Any],
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

    labels = model_names(models, names)
    bucket_list = _parse_buckets(buckets)
    check_figure_path(plot)
    pairs = list(read_parallel(src, ref, streams=True))
    srcs, refs = [p.src for p in pairs], [p.tgt for p in pairs]
    outputs: dict[str, list[str]] = {}
    first_model: list[Translation] = []  # its source tokens are what --length-unit tokens counts
    for label, path in zip(labels, models):
        translator = with_pair(Translator.load(path, device=device), languages)  # many-language models take the pair
        cfg = resolve_decode(translator, decode, label=label)
        with Progress(f"{label}: translating", total=len(srcs)) as progress:
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
    print_table(table)
    some = next(iter(overall.values()))
    typer.echo(f"BLEU: {some.bleu_signature}\nchrF: {some.chrf_signature}")
    results = _scores_by_length(srcs, outputs, refs, bucket_list, length_unit.value, first_model)
    _show_by_length(results, length_unit.value, len(pairs), plot, plot_metric.value)


