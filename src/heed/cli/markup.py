"""`heed markup`: sentences with inline markup (HTML or XML) translated with their tags carried
across by the model's alignment, or their tags projected onto translations given with --tgt (a
person's, or another engine's)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from heed.cli.app import friendly_errors, language_options
from heed.cli.decode_flags import decode_options, resolve_decode
from heed.cli.io import read_lines
from heed.cli.progress import Progress, progress_option
from heed.errors import HeedError, install_hint
from heed.plumbing.files import atomic_open, open_stream

if TYPE_CHECKING:
    from heed.api import Translator
    from heed.decode_config import DecodeConfig
    from heed.explain.priors import Priors
    from heed.markup import Marked

CHUNK = 64  # fragments translated and aligned together


@friendly_errors
@language_options
@decode_options
def markup_command(
    model: Path = typer.Argument(..., help="Model directory (or a training output directory, or an export)."),
    src: Path = typer.Option(..., "--src", help="Sentences with inline markup, one fragment a line."),
    tgt: Path | None = typer.Option(None, "--tgt", help="Plain translations, line-aligned with --src: the "
                                       "markup is projected onto them (one sentence a line). Default: the model "
                                       "translates."),
    kind: str = typer.Option("html", "--format", help="html (lenient, as a browser reads it) or xml (strict)."),
    ignore_tags: str = typer.Option("", "--ignore-tags", help="Comma-separated elements kept verbatim and "
                                    "untranslated, beside code, script, style and translate=\"no\"."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here (default: stdout)."),
    aligner: str = typer.Option("model", "--aligner", help="Whose links place the tags: model (the model's "
                                "reading), priors (eflomal on these sentences alone with the statistical priors the "
                                "model directory records, or --priors), or both (the two joined)."),
    priors_file: Path | None = typer.Option(None, "--priors", metavar="FILE", help="With --aligner priors/both: "
                                            "this priors file (heed data align --priors-out) instead of the "
                                            "model's recorded one."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    progress: bool | None = progress_option(),
    *,
    languages: dict[str, Any],
    decode: dict[str, Any],
) -> None:
    """Translate sentences with inline markup (b, i, a, span, code, br, ...), each tag placed around
    the output words its source words align to: a forced pass of the model, read as its recorded
    reading (the trained heads, or the rule measured for its kind). Attributes are copied verbatim;
    the output is well-formed and holds only the source's elements and attributes."""
    from heed.api import Translator

    ignored = tuple(t.strip() for t in ignore_tags.split(",") if t.strip())
    sources = _lines(src)
    targets = _lines(tgt) if tgt is not None else None
    if targets is not None and len(targets) != len(sources):
        raise HeedError(f"{tgt}: {len(targets)} lines, but {src} has {len(sources)}; give one translation a line")
    documents = parse_lines(sources, str(src), kind, ignored)
    for number, document in enumerate(documents, start=1):
        if targets is not None and len(document.sentences) > 1:
            raise HeedError(f"{src}: line {number} holds {len(document.sentences)} blocks; with --tgt give one "
                            "sentence a line")
    translator = Translator.load(model, device=device, **languages)
    chosen = chosen_priors(translator, model, aligner, priors_file)
    cfg = resolve_decode(translator, decode) if targets is None else None
    with Progress("sentences", total=len(documents), enabled=progress) as bar:
        results = carried(translator, documents, targets, cfg, bar, aligner=aligner, priors=chosen)
    if output is None:
        for line in results:
            typer.echo(line.replace("\n", " "))
        return
    with atomic_open(output) as sink:
        sink.write("".join(line.replace("\n", " ") + "\n" for line in results))
    typer.echo(f"markup: {output}", err=True)


def chosen_priors(translator: Translator, model: Path, aligner: str, given: Path | None) -> Priors | None:
    """The priors `--aligner` needs (none for model), said on stderr: the note of which aligner
    placed the tags. A HeedError for an unknown aligner or priors without a use."""
    from heed.explain.priors import ALIGNERS, KnownWords, priors_for
    from heed.markup import target_units

    if aligner not in ALIGNERS:
        raise HeedError(f"--aligner must be one of {', '.join(ALIGNERS)}, got {aligner!r}")
    if aligner == "model":
        if given is not None:
            raise HeedError("--priors is for --aligner priors or both")
        return None
    priors = priors_for(model, given, KnownWords(translator.codec), target_units(translator))
    typer.echo(f"aligner: {aligner} (priors {priors.path})", err=True)
    return priors


def carried(translator: Translator, documents: list[Marked], targets: list[str] | None,
            cfg: DecodeConfig | None, bar: Progress, *, aligner: str = "model", priors: Priors | None = None) -> list[str]:
    """Each document translated (decoded with `cfg`), or projected onto its line of `targets`, with
    its markup carried across by `aligner`'s links: CHUNK documents translated and aligned together."""
    from heed.markup import carry_many, translate_documents
    from heed.markup.carry import markup_reading

    reading = markup_reading(translator)
    results: list[str] = []
    for start in range(0, len(documents), CHUNK):
        chunk = documents[start:start + CHUNK]
        own = None
        if targets is None:  # the search reports the reading where it can (own_links reads it)
            own = translate_documents(translator, chunk, reading=reading if aligner == "model" else None, decode=cfg)
            given = [[t.text for t in d] for d in own]
        else:
            given = [[t] if d.sentences else [] for d, t in zip(chunk, targets[start:start + CHUNK])]
        results += [line.replace("\n", " ") for line in carry_many(
            translator, chunk, given, options=reading, translations=own, aligner=aligner,  # type: ignore[arg-type]
            priors=priors, searched=True)]
        bar.advance(len(chunk))
    return results


def parse_lines(lines: list[str], name: str, kind: str, ignore_tags: tuple[str, ...] = (), *,
                first: int = 1) -> list[Marked]:
    """Each line parsed as a fragment of `kind`; a HeedError naming the line (`first`: the number of
    the first) of one that cannot be."""
    if kind not in ("html", "xml"):
        raise HeedError(f"--format {kind!r}: give html or xml")
    try:
        from heed.markup import parse
    except ImportError as e:
        raise HeedError(f"--format {kind} needs {e.name}: {install_hint('markup')}") from None
    if kind not in ("html", "xml"):
        raise HeedError(f"--format {kind!r}: give html or xml")
    documents = []
    for number, line in enumerate(lines, start=first):
        try:
            documents.append(parse(line, kind, ignore_tags=ignore_tags))  # type: ignore[arg-type]
        except HeedError as e:
            raise HeedError(f"{name}: line {number}: {e}") from None
    return documents


def _lines(path: Path) -> list[str]:
    with open_stream(path) as stream:
        return list(read_lines(stream, str(path)))
