"""`heed data list | get | task | align | priors | shortlist`: the recipes' corpora (heed.data.download),
generated tasks, a corpus's word links from a statistical aligner (heed.explain.external) and its
priors, and a model's vocabulary shortlist (heed.search.shortlist)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from heed.cli.app import friendly_errors
from heed.cli.explain import AlignUnits, SymmetrizeHow
from heed.cli.progress import Progress
from heed.errors import DataError, HeedError

if TYPE_CHECKING:
    from heed.data.corpus import Pair

data_app = typer.Typer(name="data", help="The recipes' corpora: list them, or download one (checked by sha256); "
                       "write a generated task with its gold alignments; or word-align a corpus (eflomal).",
                       no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                       rich_markup_mode=None)


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
    mirror: str | None = typer.Option(None, "--mirror", metavar="URL", help="Fetch the same paths from this "
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
    with Progress("bytes downloaded", enabled=True) as bar:  # lines in a log too: a download can be slow
        last_file, last_seen = "", 0

        def progress(file: str, seen: int, total: int | None) -> None:
            nonlocal last_file, last_seen
            if file != last_file:
                last_file, last_seen = file, 0
            bar.advance(seen - last_seen)
            last_seen = seen

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
    config: Path | None = typer.Option(None, "--config", help="A config whose data.dates / data.names "
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
    counts = {}
    for split in ("train", "dev", "test"):
        with open(written[f"{split}.src"], encoding="utf-8") as lines:
            counts[split] = sum(1 for _ in lines)
    typer.echo(f"{name}: {counts['train']:,} train / {counts['dev']:,} dev / {counts['test']:,} test pairs -> {directory} "
               f"({', '.join(sorted(written))})")
    units = "--tgt-units chars " if name == "dates" else ""
    typer.echo(f"score a model's alignments: heed align MODEL --src {directory / 'test.src'} --tgt {directory / 'test.tgt'} "
               f"{units}--gold {directory / 'test.align'}")


@data_app.command("align")
@friendly_errors
def data_align(
    output: Path = typer.Option(..., "--output", "-o", help="The Pharaoh file to write, one line per pair."),
    tsv: Path | None = typer.Option(None, "--tsv", help="A corpus as source<TAB>target lines."),
    src: Path | None = typer.Option(None, "--src", help="The source side, one sentence a line."),
    tgt: Path | None = typer.Option(None, "--tgt", help="The target side, line-aligned with --src."),
    symmetrize: SymmetrizeHow = typer.Option(SymmetrizeHow.grow_diag_final, "--symmetrize", help="How the two "
                                             "directions join: grow-diag-final (and; Koehn et al. 2005), intersect "
                                             "or union."),
    priors_out: Path | None = typer.Option(None, "--priors-out", metavar="FILE", help="Also write the corpus's "
                                              "statistical priors (eflomal's lexical, jump and fertility counts) to "
                                              "FILE, for aligning new pairs without the corpus: record them in a "
                                              "model directory with `heed data priors MODEL FILE`."),
    priors_units: AlignUnits = typer.Option(AlignUnits.words, "--priors-units", help="What the priors count as a "
                                            "target word: whitespace words, or characters without the spaces (the "
                                            "dates task's gold, `heed align --tgt-units chars`)."),
) -> None:
    """Word-align a corpus with eflomal, a statistical aligner (`pip install 'heed-nmt[align]'`), in both
    directions, joined by --symmetrize: one Pharaoh line per pair ("i-j", 0-based whitespace words,
    source first), written whole. At most 10,000,000 pairs, held in memory (its time on
    Tatoeba: bench/RESULTS.md). Give the corpus exactly as data.train names it (not reversed), and
    the file is the links guided alignment trains on (train.alignment.supervision: FILE), or a silver
    reference for `heed align --reference` on text without a gold."""
    import time

    from heed.data.codec import MAX_TEXT_PAIRS
    from heed.data.corpus import read_parallel, read_tsv
    from heed.data.pharaoh import to_pharaoh
    from heed.explain.external import eflomal_links
    from heed.plumbing.files import atomic_open

    if (tsv is None) == (src is None and tgt is None) or (src is None) != (tgt is None):
        raise HeedError("give the corpus as --tsv FILE, or as --src FILE --tgt FILE")
    started = time.perf_counter()
    pairs: list[Pair] = []
    for pair in read_tsv(tsv) if tsv is not None else read_parallel(src, tgt):  # type: ignore[arg-type]
        if len(pairs) == MAX_TEXT_PAIRS:  # eflomal holds the whole corpus in memory, as training from text does
            raise DataError(f"more than {MAX_TEXT_PAIRS:,} pairs, more than heed data align holds in memory; align "
                            "the corpus in parts of at most that many lines and join the files", path=tsv or src)
        pairs.append(pair)
    warn = lambda message: typer.echo(f"warning: {message}", err=True)
    priors = None
    if priors_out is not None:  # learned first: nothing is written when it fails
        priors = _priors_of(pairs, priors_units.value)
    links = eflomal_links(pairs, how=symmetrize.value, warn=warn)
    with atomic_open(output) as sink:
        sink.writelines(to_pharaoh(sorted(pair_links)) + "\n" for pair_links in links)
    if priors_out is not None and priors is not None:
        with atomic_open(priors_out) as sink:
            sink.write(priors)
        typer.echo(f"priors ({priors_units.value}) -> {priors_out}; record them in a model directory with "
                   f"`heed data priors MODEL {priors_out}`")
    typer.echo(f"{len(pairs):,} pairs aligned by eflomal ({symmetrize.value}; {sum(map(len, links)):,} links) in "
               f"{time.perf_counter() - started:.1f} s -> {output}")


def _scheme(url: str) -> str:
    from urllib.parse import urlsplit

    return urlsplit(url).scheme


def _priors_of(pairs: list[Pair], units: str) -> str:
    """The priors file's text: eflomal's two directions on the corpus in `units`, counted."""
    from heed.data.corpus import Pair
    from heed.explain.external import eflomal_directions
    from heed.explain.priors import needs_eflomal, priors_text, unit_text

    needs_eflomal()
    unit_pairs = [Pair(p.src, unit_text(p.tgt, units)) for p in pairs]  # type: ignore[arg-type]
    forward, backward = eflomal_directions(unit_pairs)
    return priors_text(pairs, forward, backward, units=units)  # type: ignore[arg-type]


@data_app.command("priors")
@friendly_errors
def data_priors(
    model: Path = typer.Argument(..., metavar="MODEL", help="The model directory to record the priors in."),
    priors: Path = typer.Argument(..., metavar="FILE", help="A priors file from `heed data align --priors-out` on "
                                  "the model's training corpus."),
) -> None:
    """Record statistical priors in a model directory: FILE is checked (whole, its words in the model's
    vocabulary), copied in as priors.eflomal and listed in heed.json with its sha256, so `heed align
    --aligner priors|both`, `heed markup --aligner` and the server's /v1/align use them."""
    from heed.checkpoint import find_model_dir, read_meta, verify_files
    from heed.data.codec import Codec
    from heed.explain.priors import KnownWords, record_priors

    directory = find_model_dir(model)
    verify_files(directory, read_meta(directory))
    got = record_priors(directory, priors, KnownWords(Codec.load(directory)))
    typer.echo(f"priors of {got.pairs:,} pairs ({got.units}, {len(got.lines):,} lines) -> {directory}/priors.eflomal")


@data_app.command("shortlist")
@friendly_errors
def data_shortlist(
    model: Path = typer.Argument(..., metavar="MODEL", help="The model directory the shortlist is for."),
    tsv: Path | None = typer.Option(None, "--tsv", help="A corpus as source<TAB>target lines (the model's training "
                                    "corpus, or one like it)."),
    src: Path | None = typer.Option(None, "--src", help="The corpus's source side, one sentence a line."),
    tgt: Path | None = typer.Option(None, "--tgt", help="The target side, line-aligned with --src."),
    k: int = typer.Option(50, "--k", min=1, max=10_000, help="Target pieces listed for each source piece."),
    common: int = typer.Option(500, "--common", min=0, help="The target side's most frequent pieces, which every "
                               "batch searches."),
    from_file: Path | None = typer.Option(None, "--from", metavar="FILE", help="Record this shortlist file (from "
                                          "--output) instead of counting one."),
    output: Path | None = typer.Option(None, "--output", "-o", metavar="FILE", help="Write the shortlist to FILE "
                                       "instead of recording it in MODEL."),
) -> None:
    """A vocabulary shortlist for MODEL: for each source piece its --k likeliest target pieces, counted
    over a parallel corpus (p(t | s) over sentence pairs), and the --common most frequent target pieces.
    It is recorded in the model directory (shortlist.json, listed in heed.json with its sha256), where
    `heed translate --shortlist`, the server's `shortlist` decode option and `heed export --format
    ctranslate2` (as CTranslate2's vocabulary map) use it. What it costs in quality and gains in speed:
    bench/RESULTS.md ("What a shortlist costs")."""
    from heed.checkpoint import find_model_dir, read_meta, verify_files
    from heed.data.codec import Codec
    from heed.data.corpus import read_parallel, read_tsv
    from heed.plumbing.files import atomic_write_text
    from heed.search.shortlist import Vocabularies, build_shortlist, record_shortlist

    directory = find_model_dir(model)
    verify_files(directory, read_meta(directory))
    codec = Codec.load(directory)
    vocabularies = Vocabularies.of(directory, codec)
    if from_file is not None:
        if tsv is not None or src is not None or tgt is not None or output is not None:
            raise HeedError("--from records a shortlist file as it is: not with a corpus or --output")
        shortlist = vocabularies.read(from_file)
    else:
        if (tsv is None) == (src is None and tgt is None) or (src is None) != (tgt is None):
            raise HeedError("give the corpus as --tsv FILE, or as --src FILE --tgt FILE (or a shortlist file: --from)")
        specials = codec.special_ids()
        pairs = read_tsv(tsv) if tsv is not None else read_parallel(src, tgt)  # type: ignore[arg-type]
        with Progress("pairs counted", enabled=None) as bar:
            def ids() -> Iterator[tuple[list[int], list[int]]]:
                for pair in pairs:
                    src_tokens = codec.src_tokens(pair.src)
                    yield codec.src_ids(src_tokens), codec.tgt_ids(codec.tgt_tokens(pair.tgt), src_tokens)
                    bar.advance(1)

            shortlist = build_shortlist(ids(), src_vocab=len(codec.src_vocab), tgt_vocab=len(codec.tgt_vocab), k=k,
                                        common=common, skip=set(specials.values()))
    text = vocabularies.text(shortlist)
    if output is not None:
        atomic_write_text(output, text)
        where = str(output)
    else:
        record_shortlist(directory, text)
        where = f"{directory}/shortlist.json"
    typer.echo(f"shortlist of {shortlist.pairs:,} pairs: {len(shortlist.always):,} common pieces, "
               f"{len(shortlist.table):,} source pieces x up to {shortlist.k} -> {where}")
