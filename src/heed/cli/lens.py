"""`heed lens`: what each decoder layer would predict were it the last (the logit lens)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from heed.cli.app import escape, friendly_errors, language_options
from heed.cli.io import cut_long_texts, given_files, lines_named, print_table, read_sources, warn_long_sources
from heed.cli.progress import Progress, progress_option
from heed.plumbing.files import atomic_open
from heed.plumbing.limits import MAX_LENS_TOP

if TYPE_CHECKING:
    from heed.explain.logit_lens import LogitLens

MAX_SHOWN = 5  # sentences whose tables are printed; the JSON holds every one


@friendly_errors
@language_options
def lens(
    model: Path = typer.Argument(..., help="Transformer model directory (or a training output directory)."),
    src: Path = typer.Option(..., "--src", help="Source sentences, one per line."),
    tgt: Path | None = typer.Option(None, "--tgt", help="Translations to read, line-aligned with --src "
                                       "(default: the model's own translations)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write every layer's top tokens, their "
                                          "probabilities and the real token's probability and rank, as JSON."),
    top: int = typer.Option(5, "--top", min=1, max=MAX_LENS_TOP, help=f"Tokens kept per layer and position in the "
                            f"JSON (1 to {MAX_LENS_TOP})."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    progress: bool | None = progress_option(),
    *,
    languages: dict[str, Any],
) -> None:
    """The logit lens (nostalgebraist 2020): each decoder layer's stream at every output position,
    read through the final norm and the output layer as the last layer's is. The last layer's row
    is the model's own prediction; earlier rows show where it formed.

    Prints, for the first 5 sentences, a table a row per output token, a column per decoder layer:
    the layer's likeliest token with its probability, and the real token's rank there when it is
    not the top. One teacher-forced pass per sentence; the logits of one layer at a time."""
    from heed.api import Translator

    sources, targets = read_sources(src, tgt, empty="there is nothing to read")
    translator = Translator.load(model, device=device, **languages)
    warn_long_sources(translator, sources, str(src))
    if targets is not None:
        targets = cut_long_texts(translator, targets, str(tgt))
    results: list[LogitLens] = []
    with Progress("sentences read", total=len(sources), enabled=progress) as bar:
        for start in range(0, len(sources), 8):
            chunk = sources[start:start + 8]
            with lines_named(given_files(src, tgt), first=start + 1):
                results += translator.logit_lens(chunk, None if targets is None else targets[start:start + 8], top=top)
            bar.advance(len(chunk))
    if output is not None:
        with atomic_open(output) as sink:
            json.dump([r.to_dict() for r in results], sink, ensure_ascii=False)
            sink.write("\n")
    for number, r in enumerate(results[:MAX_SHOWN], start=1):
        print_table(_table(number, r))
    if len(results) > MAX_SHOWN:
        typer.echo(f"({len(results) - MAX_SHOWN} more sentences{' in ' + str(output) if output else ''})")
    if output is not None:
        typer.echo(f"lens: {output}")


def _table(number: int, r: LogitLens) -> Table:
    """A row per output token, a column per decoder layer: the layer's top token and its probability,
    and the real token's rank there when it is not the top (long outputs stay readable: a model
    has fewer layers than a sentence has tokens)."""
    table = Table(title=f"{number}: {escape(' '.join(r.src_tokens))}", title_justify="left")
    table.add_column("output")
    for layer in range(len(r.top_tokens)):
        table.add_column(f"layer {layer}", justify="left")
    for j, token in enumerate([*r.tgt_tokens, "</s>"]):
        cells = []
        for layer in range(len(r.top_tokens)):
            rank = int(r.target_ranks[layer, j])
            mark = "" if rank == 0 else f" (#{rank + 1})"
            cells.append(f"{escape(r.top_tokens[layer][j][0])} {r.top_probs[layer, j, 0]:.2f}{mark}")
        table.add_row(escape(token), *cells)
    return table
