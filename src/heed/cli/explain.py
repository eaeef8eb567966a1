"""`heed attention`, `align`, `attribute` and `faithfulness`: looking inside a model (heed.explain)."""
from __future__ import annotations

import enum
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import typer
from rich.console import Console

from heed.cli.app import escape, friendly_errors, language_options, stderr, with_pair
from heed.cli.decode_flags import decode_options, resolve_decode
from heed.cli.io import (
    check_figure_path,
    cut_long_texts,
    given_files,
    lines_named,
    print_table,
    read_lines,
    read_sources,
    truncation_message,
    warn_long_sources,
)
from heed.cli.progress import Progress, progress_option
from heed.errors import HeedError
from heed.plumbing.files import atomic_open, open_stream
from heed.plumbing.limits import MAX_ATTRIBUTION_STEPS

if TYPE_CHECKING:
    from heed.api import Translator
    from heed.data.units import Units
    from heed.explain.align_methods import AlignOptions, Symmetrize, Weights


DRAW_LAYER_OPTION = typer.Option(None, "--layer", help="Decoder layer to draw (0-based) or 'mean' for all layers' "
                                 "average (default: the last); with --grid, the one layer whose heads to draw.")
DRAW_HEAD_OPTION = typer.Option(None, "--head", help="Attention head (0-based), heads joined by commas (0,3: their "
                                "mean), or 'mean' (the default).")
DRAW_GRID_OPTION = typer.Option(False, "--grid", help="Draw every head of every decoder layer of one sentence: a grid "
                                "of small heatmaps, a row per layer and a column per head.")


@friendly_errors
@decode_options
@language_options
def attention(
    model: Path = typer.Argument(..., help="Model directory (or a training output directory; with --checkpoints "
                                 "or --entropy, the training output directory)."),
    sentences: list[str] | None = typer.Argument(None, help="Source sentences to translate and plot (one with "
                                                    "--checkpoints, none with --entropy)."),
    output: Path = typer.Option(Path("attention.png"), "--output", "-o", help="Figure file: .png, .svg or .pdf."),
    checkpoints: bool = typer.Option(False, "--checkpoints", help="Draw how the sentence's attention changed over "
                                     "training: one heatmap per kept checkpoint of the run (checkpoints/step-*, "
                                     "train.keep_checkpoints), all reading the same output."),
    target: str | None = typer.Option(None, "--tgt", help="With --checkpoints: the output every checkpoint "
                                         "reads (default: the run's model's translation of the sentence)."),
    most: int = typer.Option(12, "--most", min=1, max=48, help="With --checkpoints: draw at most this many, evenly "
                             "spaced (the first and the last always)."),
    entropy: bool = typer.Option(False, "--entropy", help="Draw each head's attention entropy over training from "
                                 "the run's metrics.jsonl (logged at every dev evaluation)."),
    layer: str | None = DRAW_LAYER_OPTION,
    head: str | None = DRAW_HEAD_OPTION,
    grid: bool = DRAW_GRID_OPTION,
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    *,
    decode: dict[str, Any],
    languages: dict[str, Any],
) -> None:
    """Translate sentences and draw where the model looked: one attention heatmap per sentence.

    A Transformer's heatmap is the cross-attention of its last decoder layer, averaged over the heads;
    --layer and --head pick another (the output read again with teacher forcing), and
    `heed attention MODEL --grid "one sentence"` draws every head of every layer. A sentence longer
    than the model's data.max_src_len tokens is cut to that many (with a warning); a heatmap over
    more than 200 tokens a side is unreadable and refused, a grid over more than 60.

    Over training: `heed attention RUN --checkpoints "one sentence"` draws its attention at each
    checkpoint the run kept; `heed attention RUN --entropy` draws each head's entropy curve."""
    from heed.viz import MAX_HEATMAP_TOKENS, attention_grid, save_figure

    sentences = list(sentences or [])
    check_figure_path(output)
    if checkpoints and entropy:
        raise HeedError("--checkpoints and --entropy draw different figures; give one of them")
    heads = _head_options(layer, head, grid, other=checkpoints or entropy, sentences=len(sentences))
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

    translator = Translator.load(model, device=device, **languages)
    cfg = resolve_decode(translator, decode)
    _check_source_lengths(translator, sentences)  # before translating: the source bounds the cost
    translations = translator.translate(sentences, decode=cfg)
    cut = [k for k, t in enumerate(translations, start=1) if t.truncated]
    if cut:
        stderr().print(f"[yellow]warning:[/] {escape(truncation_message(cut, 'sentences', translator.max_src_len))}",
                        soft_wrap=True)
    for number, (sentence, t) in enumerate(zip(sentences, translations), start=1):
        if len(t.tokens) + 1 > MAX_HEATMAP_TOKENS:
            raise HeedError(f"the translation of sentence {number} ({preview(sentence)}) is {len(t.tokens)} tokens "
                            f"long; a heatmap over more than {MAX_HEATMAP_TOKENS} tokens a side is unreadable: "
                            "give a shorter sentence")
    items = [(*t.labels(), t.attention) for t in translations if t.attention is not None and t.src_tokens]
    if not items:
        raise HeedError("nothing to draw: the model has no attention, or every sentence is empty")
    for sentence, t in zip(sentences, translations):
        typer.echo(f"{sentence}\t{t.text}")
    if heads is not None:
        path = save_figure(_heads_figure(translator, sentences, translations, *heads), output)
    else:
        path = save_figure(attention_grid(items, titles=[s for s, t in zip(sentences, translations)
                                                         if t.attention is not None and t.src_tokens]), output)
    typer.echo(f"attention heatmap: {path}")


def _check_source_lengths(translator: Translator, sentences: list[str]) -> None:
    """A HeedError naming the first sentence too long to draw (more than MAX_HEATMAP_TOKENS tokens)."""
    from heed.viz import MAX_HEATMAP_TOKENS

    for number, sentence in enumerate(sentences, start=1):
        length = min(len(translator.codec.src_tokens(sentence)), translator.max_src_len)
        if length + 1 > MAX_HEATMAP_TOKENS:  # + the </s> column
            raise HeedError(f"sentence {number} ({preview(sentence)}) is {length} tokens long; a heatmap over more "
                            f"than {MAX_HEATMAP_TOKENS} tokens a side is unreadable: give a shorter sentence")


def _head_options(layer: str | None, head: str | None, grid: bool, *, other: bool,
                  sentences: int) -> tuple[AlignOptions, bool] | None:
    """heed attention's --layer / --head / --grid as (the heads to draw, whether as a grid), or
    None (the translation's own attention); refused where they cannot apply."""
    from heed.explain.align_methods import AlignOptions, parse_index

    if layer is None and head is None and not grid:
        return None
    if other:
        raise HeedError("--layer, --head and --grid draw a translation's heads; leave them out of --checkpoints "
                        "and --entropy")
    if grid and head is not None:
        raise HeedError("--grid draws every head; leave out --head (or draw one head without --grid)")
    if grid and sentences != 1:
        raise HeedError(f"--grid draws every head of one sentence; got {sentences}")
    try:
        options = AlignOptions(layer=parse_index(layer, "--layer"), head=parse_index(head, "--head", several=True))
    except ValueError as e:
        raise HeedError(str(e)) from None
    if grid and options.layer == "mean":
        raise HeedError("--grid draws each layer's heads: give --layer a layer number, or leave it out for every layer")
    return options, grid


def _heads_figure(translator: Translator, sentences: list[str], translations: list[Any],
                  options: AlignOptions, grid: bool) -> Any:
    """The heads --layer / --head (or --grid) pick, read by teacher forcing each sentence's translation."""
    from heed.explain.align_methods import check_selection, select_attention
    from heed.viz import attention_grid, head_grid

    pairs = [(s, t) for s, t in zip(sentences, translations) if t.src_tokens]
    maps = translator.attention_layers([s for s, _ in pairs], [t.tokens for _, t in pairs])
    layers, n_heads = maps[0].cross.shape[:2]
    try:
        check_selection(options, layers, n_heads)
    except ValueError as e:
        raise HeedError(str(e)) from None
    if grid:
        picked = [options.layer] if isinstance(options.layer, int) else list(range(layers))  # "mean" is refused
        (sentence, t), cross = pairs[0], maps[0].cross
        src_labels, tgt_labels = t.labels()
        return head_grid(src_labels, tgt_labels, cross[picked], layers=picked, title=sentence)
    items = [(*t.labels(), select_attention(m.cross, options, default_layer=layers - 1))
             for (_, t), m in zip(pairs, maps)]
    return attention_grid(items, titles=[f"{s}  ({options.selection()})" for s, _ in pairs])


def _draw_history(run: Path, sentence: str, target: str | None, *, most: int, output: Path, device: str,
                  decode: dict[str, Any]) -> None:
    """heed attention RUN --checkpoints: one heatmap per kept checkpoint, in step order."""
    from heed.api import EOS_TOKEN, Translator
    from heed.explain.history import attention_over_training, final_model
    from heed.viz import MAX_HEATMAP_TOKENS, attention_grid, save_figure

    if not sentence.strip():
        raise HeedError("the sentence is empty: give a source sentence to follow over training")
    final = Translator.load(final_model(run), device=device)
    if target is not None:  # a token the model does not know is refused, as translate's --prefix is
        target = cut_long_texts(final, [target], "--tgt")[0]
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


def preview(sentence: str, chars: int = 40) -> str:
    """The start of a sentence, quoted, for a one-line message."""
    return repr(sentence if len(sentence) <= chars else sentence[:chars] + "...")


class AlignMethod(str, enum.Enum):
    argmax = "argmax"
    shift = "shift"


class AlignWeights(str, enum.Enum):
    attention = "attention"
    value_norm = "value-norm"
    rollout = "rollout"
    alti = "alti"
    alignment_layer = "alignment-layer"

    @property
    def reading(self) -> Weights:
        """The name heed.explain.align_methods.AlignOptions.weights takes."""
        return WEIGHT_READINGS[self.value]


WEIGHT_READINGS: dict[str, Weights] = {"attention": "attention", "value-norm": "value_norm", "rollout": "rollout",
                                        "alti": "alti", "alignment-layer": "alignment_layer"}  # --weights -> AlignOptions.weights


class AlignUnits(str, enum.Enum):
    words = "words"
    chars = "chars"


class AlignJoin(str, enum.Enum):
    sum = "sum"
    max = "max"


class AlignerChoice(str, enum.Enum):
    model = "model"
    priors = "priors"
    both = "both"


class CombineRule(str, enum.Enum):
    intersect = "intersect"
    union = "union"
    product = "product"
    fill = "fill"
    grow_diag_final = "grow-diag-final"
    arbitrate = "arbitrate"


class SymmetrizeHow(str, enum.Enum):
    intersect = "intersect"
    union = "union"
    grow_diag_final = "grow-diag-final"


METHOD_OPTION = typer.Option(None, "--method", help="argmax: link each target word by the step that predicts it; "
                             "shift: by the step that reads it as input (shift-att, Chen et al. 2020). Default: the "
                             "model's default reading: the method training recorded, else argmax.")
WEIGHTS_OPTION = typer.Option(None, "--weights", help="attention: the weights as they are; value-norm: each weight "
                              "times the norm of what its source word adds through its head (Kobayashi et al. 2020); "
                              "rollout: attention rolled out through every layer with the residual (Abnar & Zuidema "
                              "2020); alti: ALTI+, each source token's contribution through every layer (Ferrando et "
                              "al. 2022). All but attention read contributions and need a Transformer model "
                              "directory; rollout and alti mix the heads (--layer, no --head). alignment-layer: the "
                              "weights of the model's alignment layer (model.alignment_layer: an attention that "
                              "reads the whole target, trained to align; no --layer). Default: the model's "
                              "default reading: the weights training recorded (its alignment layer where it has "
                              "one), else the measured rule's (value-norm "
                              "for a Transformer model directory, attention for an RNN, an ensemble or an export).")
JOIN_OPTION = typer.Option(None, "--join", help="How a source word's pieces join: sum (the chance of looking at any of "
                           "them) or max (its sharpest piece). Default: what training measured on its dev gold, else "
                           "sum.")
NULL_THRESHOLD_OPTION = typer.Option(None, "--null-threshold", help="In [0, 1]: leave a target word unlinked when its "
                                     "best source word holds less than this share of its row's weight on the source "
                                     "(null links; 0 links every word). Default: what training measured on its dev "
                                     "gold, else 0.")
SYMMETRIZE_OPTION = typer.Option(None, "--symmetrize", help="With --reverse or a recorded pair: keep links both "
                                 "agree on (intersect), either has (union), or grow-diag-final-and (Koehn et al. "
                                 "2005). Default: the rule the pair records, else grow-diag-final.")


ALIGN_SRC_OPTION = typer.Option(..., "--src", help="Source sentences, one per line.")
ALIGN_TGT_OPTION = typer.Option(..., "--tgt", help="Their translations, line-aligned with --src.")
ALIGN_OUTPUT_OPTION = typer.Option(None, "--output", "-o", help="Where to write the alignments (default: stdout).")
GOLD_OPTION = typer.Option(None, "--gold", help="Optional gold alignments (Pharaoh; i-j or i-j-S sure, i-j-P, i?j or "
                           "ipj possible): print the alignment error rate, beside the diagonal baseline's.")
ALIGN_LAYER_OPTION = typer.Option(None, "--layer", help="Decoder layer to read (0-based) or 'mean' for all layers' "
                                  "average. Default: the model's default reading: the layer training recorded, else "
                                  "the measured rule's (a pre-norm Transformer's second-to-last, a post-norm one's "
                                  "mean of all layers, an RNN's only one; an ensemble's or export's reported "
                                  "attention, its last).")
ALIGN_HEAD_OPTION = typer.Option(None, "--head", help="Attention head (0-based), heads joined by commas (0,3: their "
                                 "mean), or 'mean'. Default: the heads guided alignment trained, else the mean of the "
                                 "layer's heads.")
TGT_UNITS_OPTION = typer.Option(AlignUnits.words, "--tgt-units", help="Target positions in whitespace words, or in "
                                "characters (spaces not counted; the dates task's gold is so).")
REVERSE_OPTION = typer.Option(None, "--reverse", help="A model trained the other way (target -> source, e.g. by heed "
                              "train --both-directions): its alignments, by its own default reading, are joined with "
                              "this model's by --symmetrize. Default: the reverse model the pair records "
                              "(heed.pair.json), if any.")
ONE_WAY_OPTION = typer.Option(False, "--one-way", help="Read this model alone, even where a pair is recorded.")
REFERENCE_OPTION = typer.Option(None, "--reference", help="Another aligner's Pharaoh file (eflomal's from `heed data "
                                "align`, fast_align's): the model's precision, recall and F1 against it (a silver "
                                "measure without a gold), and with --gold its AER beside the model's.")
BESIDE_OPTION = typer.Option(None, "--beside", help="Another model on the same vocabularies (e.g. the int8 export of "
                             "this one): its attention read on the same pairs, the mean |difference| per cell and the "
                             "links that differ (and its AER with --gold).")
SWEEP_OPTION = typer.Option(False, "--sweep", help="With --gold: the AER of every method x layer x head (and their "
                            "means) as a table and a heatmap (--plot), beside the default reading's, instead of "
                            "writing alignments; with --reference: the agreement F1 with its links the same way (with "
                            "both: both, the F1 heatmap in PLOT-f1).")
PLOT_OPTION = typer.Option(Path("aer_sweep.png"), "--plot", help="With --sweep: the heatmap's file (.png, .svg, .pdf).")
ALIGNER_OPTION = typer.Option(AlignerChoice.model, "--aligner", help="Whose links: model (the model's reading), priors "
                              "(eflomal on these pairs alone with the statistical priors the model directory records, "
                              "or --priors), or both (the two combined by --combine).")
PRIORS_OPTION = typer.Option(None, "--priors", metavar="FILE", help="With --aligner priors/both: this priors file (heed "
                             "data align --priors-out) instead of the model's recorded one.")
COMBINE_OPTION = typer.Option(None, "--combine", help="With --aligner both: intersect or union of the model's links and "
                              "the priors'; fill: the priors' links, the model's for the target words they leave "
                              "unlinked; grow-diag-final of the two; product: each target word's source word by the "
                              "model's attention times the priors' lexical probability (to the power --priors-weight); "
                              "or arbitrate: eflomal's two directions joined by grow-diag-final with the model deciding "
                              "the links they dispute (kept where its attention gives them at least 5% of the target "
                              "word's row, its strongest first). "
                              "Default: the rule measured best (heed.explain.priors.BOTH_RULE).")
PRIORS_WEIGHT_OPTION = typer.Option(1.0, "--priors-weight", help="With --combine product: the exponent on the priors' "
                                    "probability, 0 (the model alone) to 10.")
BATCH_OPTION = typer.Option(64, "--batch-size", min=1, help="Sentence pairs per batch.")
DEVICE_OPTION = typer.Option("auto", "--device", help="auto, cpu or cuda.")


@friendly_errors
@language_options
def align(
    model: Path = typer.Argument(..., help="Model directory (or a training output directory)."),
    src: Path = ALIGN_SRC_OPTION,
    tgt: Path = ALIGN_TGT_OPTION,
    output: Path | None = ALIGN_OUTPUT_OPTION,
    gold: Path | None = GOLD_OPTION,
    method: AlignMethod | None = METHOD_OPTION,
    layer: str | None = ALIGN_LAYER_OPTION,
    head: str | None = ALIGN_HEAD_OPTION,
    weights: AlignWeights | None = WEIGHTS_OPTION,
    join: AlignJoin | None = JOIN_OPTION,
    null_threshold: float | None = NULL_THRESHOLD_OPTION,
    tgt_units: AlignUnits = TGT_UNITS_OPTION,
    reverse: Path | None = REVERSE_OPTION,
    one_way: bool = ONE_WAY_OPTION,
    symmetrize: SymmetrizeHow | None = SYMMETRIZE_OPTION,
    reference: Path | None = REFERENCE_OPTION,
    beside: Path | None = BESIDE_OPTION,
    sweep_all: bool = SWEEP_OPTION,
    plot: Path = PLOT_OPTION,
    aligner: AlignerChoice = ALIGNER_OPTION,
    priors_file: Path | None = PRIORS_OPTION,
    combine: CombineRule | None = COMBINE_OPTION,
    priors_weight: float = PRIORS_WEIGHT_OPTION,
    batch_size: int = BATCH_OPTION,
    device: str = DEVICE_OPTION,
    progress: bool | None = progress_option(),
    *,
    languages: dict[str, Any],
) -> None:
    """Word-align --src with --tgt by the model's attention: each target word is linked to the source
    word it attends to most while the model reads --tgt as its own output (forced decoding).

    One Pharaoh line per sentence pair: "i-j" links, i a 0-based word of the source, j of the target,
    words being the whitespace-separated words whatever the model's tokens (subword and character
    attention is summed over each source word's pieces and averaged over each target word's); with
    --tgt-units chars, j counts the target's characters.

    The default reading (Translator.default_reading; stderr names it): the one training recorded
    (the heads guided alignment trained, train.alignment, or the best reading scored on a dev
    gold), else the rule measured for the model's kind (MeasuredReading, docs/look-inside.md,
    section 8): argmax of value-norm-weighted attention, of the second-to-last decoder layer for a
    pre-norm Transformer and of the mean of all layers for a post-norm one; argmax of an RNN's
    attention as it is; an ensemble's or an export's reported attention (the last layer's heads
    averaged). --layer, --head, --method and --weights choose another reading, and --sweep --gold
    scores them all. --join and --null-threshold say how source pieces join and when a target word
    is left unlinked, on whichever reading (the recorded reading's own, measured at training, by
    default). With --gold the alignment error rate goes to stdout, or to
    stderr when the alignments do, beside the diagonal baseline (target word j -> source word
    round(j*|src|/|tgt|)), which a useful reading must beat. --beside OTHER reads the pairs with
    another model (its int8 export, say) and says how far its attention and links are."""
    from heed.api import Translator

    options = _align_options(method, layer, head, tgt_units, weights, gold=gold, sweep_all=sweep_all, reference=reference,
                             reverse=reverse, output=output, beside=beside, plot=plot, join=join,
                             null_threshold=null_threshold, one_way=one_way)
    _check_aligner(aligner, combine, priors_weight, model_alone=sweep_all or reverse is not None or beside is not None)
    pairs, units, golden, theirs = _read_pairs(src, tgt, gold, reference, options.tgt_units)
    translator = Translator.load(model, device=device, **languages)
    backward, how = _reverse_model(translator, model, reverse, symmetrize, device=device, languages=languages,
                                   recorded=not (one_way or sweep_all or beside is not None)
                                   and aligner is AlignerChoice.model and options.tgt_units == "words")
    priors = _priors(model, aligner, priors_file, translator, options.tgt_units)
    # Cut after the gold is read against the whole pairs: its links past a cut count as missed.
    src_texts = cut_long_texts(translator, [p.src for p in pairs], str(src), side="src")
    tgt_texts = cut_long_texts(translator, [p.tgt for p in pairs], str(tgt))
    given = (method, layer, head, weights)
    options = _words_asked(_recorded_reading_of(translator, options, given=given), join, null_threshold)
    other = None if beside is None else with_pair(Translator.load(beside, device=device), languages)
    if sweep_all:
        _print_sweeps(translator, src_texts, tgt_texts, golden, (reference, theirs), options, plot, batch_size)
        return
    links, what = _links(translator, (aligner, combine, priors, priors_weight), pairs, (src_texts, tgt_texts), options,
                         batch_size=batch_size, progress=progress)
    if backward is not None:
        links, what = _symmetrized(links, backward, src_texts, tgt_texts, how, batch_size), f"{what}, {how} with its reverse"
    _write_lines([_pharaoh_line(link_set) + "\n" for link_set in links], output)
    besides = None if other is None else _beside(translator, other, links, src_texts, tgt_texts, options, given=given,
                                                 batch_size=batch_size, name=str(beside), err=output is None)
    _print_scores(links, units, what, golden, (reference, theirs), (beside, besides), err=output is None)


def _check_aligner(aligner: AlignerChoice, combine: CombineRule | None, priors_weight: float, *,
                   model_alone: bool) -> None:
    """heed align's --aligner, --combine and --priors-weight, refused where they cannot go with the
    rest (`model_alone`: --sweep, --reverse or --beside, which read the model alone)."""
    from heed.explain.priors import check_weight

    if aligner is not AlignerChoice.model and model_alone:
        raise HeedError(f"--aligner {aligner.value} aligns by the priors too; --sweep, --reverse and --beside read the "
                        "model alone (use --aligner model)")
    if combine is not None and aligner is not AlignerChoice.both:
        raise HeedError("--combine combines the model's links with the priors': give it with --aligner both")
    check_weight(priors_weight)


def _read_pairs(src: Path, tgt: Path, gold: Path | None, reference: Path | None,
                tgt_units: Units) -> tuple[list[Any], list[tuple[int, int]], Any, Any]:
    """(the pairs of --src and --tgt, each pair's (source words, target units), --gold's (sure,
    possible), --reference's links): the golds checked against the whole pairs."""
    from heed.data.corpus import read_parallel
    from heed.data.units import unit_count

    pairs = list(read_parallel(src, tgt, streams=True))
    units = [(len(p.src.split()), unit_count(p.tgt, tgt_units)) for p in pairs]
    golden, theirs = _read_golds(gold, reference, units, tgt_units, sides=f"{src} and {tgt}")
    return pairs, units, golden, theirs


def _priors(model: Path, aligner: AlignerChoice, priors_file: Path | None, translator: Translator,
            tgt_units: Units) -> Any:
    """The statistical priors --aligner priors or both reads (--priors, else the model's recorded
    ones); None for --aligner model."""
    if aligner is AlignerChoice.model:
        return None
    from heed.explain.priors import KnownWords, priors_for

    return priors_for(model, priors_file, KnownWords(translator.codec), tgt_units)


def _links(translator: Translator, chosen: tuple[AlignerChoice, CombineRule | None, Any, float], pairs: list[Any],
           texts: tuple[list[str], list[str]], options: AlignOptions, *, batch_size: int,
           progress: bool | None) -> tuple[list[set[tuple[int, int]]], str]:
    """(every pair's links, what gave them): the model's reading, or with `chosen` (--aligner,
    --combine, the priors, --priors-weight) the priors' links or both's."""
    from heed.explain.forced import attention_shape

    aligner, combine, priors, weight = chosen
    what = options.describe(attention_shape(translator.model)[:2])
    if priors is None:
        return _align_all(translator, *texts, options, batch_size=batch_size, progress=progress), what
    return _links_with_priors(translator, aligner, combine, priors, weight, pairs, texts, options, what,
                              batch_size=batch_size)


def _print_sweeps(translator: Any, src_texts: list[str], tgt_texts: list[str], golden: Any,
                  reference: tuple[Path | None, Any], options: AlignOptions, plot: Path, batch_size: int) -> None:
    """--sweep: every reading's AER against --gold, and its F1 against --reference's links."""
    default = translator.default_reading(options.tgt_units)
    if golden is not None:
        _print_sweep(translator.align_sweep(src_texts, tgt_texts, *golden, tgt_units=options.tgt_units,
                                            batch_size=batch_size), plot, len(src_texts), default=default)
    path, theirs = reference
    if theirs is not None:  # F1 against another aligner's links = 1 - AER with them as sure and possible
        f1_plot = plot if golden is None else plot.with_name(f"{plot.stem}-f1{plot.suffix}")
        _print_sweep(translator.align_sweep(src_texts, tgt_texts, theirs, theirs, tgt_units=options.tgt_units,
                                            batch_size=batch_size), f1_plot, len(src_texts), default=default,
                     measure=SweepMeasure("F1", f", against {path}", False))


def _links_with_priors(translator: Any, aligner: AlignerChoice, combine: CombineRule | None, priors: Any,
                       weight: float, pairs: list[Any], texts: tuple[list[str], list[str]], options: AlignOptions,
                       what: str, *, batch_size: int) -> tuple[list[set[tuple[int, int]]], str]:
    """(links, what gave them) of --aligner priors or both, the model reading `texts` (the pairs as
    cut to its lengths); stderr names the aligner."""
    from heed.explain.priors import BOTH_RULE, aligner_links

    src_texts, tgt_texts = texts
    rule = (combine or CombineRule(BOTH_RULE)).value
    links = aligner_links(aligner.value, lambda: translator.align(src_texts, tgt_texts, options=options,
                                                                  batch_size=batch_size),
                          pairs, priors, units=options.tgt_units, rule=rule, weight=weight)  # type: ignore[arg-type]
    weighted = f" (weight {weight:g})" if rule == "product" else ""
    what = (f"aligner priors ({priors.path})" if aligner is AlignerChoice.priors
            else f"aligner both ({rule}{weighted} of {what} and the priors of {priors.path})")
    stderr().print(f"aligner: {what}", soft_wrap=True)
    return links, what


def _align_options(method: AlignMethod | None, layer: str | None, head: str | None, tgt_units: AlignUnits,
                   weights: AlignWeights | None, *,
                   gold: Path | None, sweep_all: bool, reference: Path | None, reverse: Path | None,
                   output: Path | None, beside: Path | None, plot: Path, join: AlignJoin | None = None,
                   null_threshold: float | None = None, one_way: bool = False) -> AlignOptions:
    """`heed align`'s reading of the attention, once its flags are known to go together."""
    from heed.explain.align_methods import AlignOptions, check_null_threshold, parse_index

    try:
        if null_threshold is not None:
            check_null_threshold(null_threshold, "--null-threshold")
        options = _words_asked(AlignOptions(method=(method or AlignMethod.argmax).value,
                                            layer=parse_index(layer, "--layer"),
                                            head=parse_index(head, "--head", several=True), tgt_units=tgt_units.value,
                                            weights=(weights or AlignWeights.attention).reading),
                               join, null_threshold)
    except ValueError as e:
        raise HeedError(str(e)) from None
    if sweep_all and gold is None and reference is None:
        raise HeedError("--sweep scores every reading against gold alignments (--gold FILE: AER) or another "
                        "aligner's (--reference FILE: agreement F1); give one or both")
    if sweep_all and (reverse is not None or output is not None):
        raise HeedError("--sweep prints AER and writes no alignments: leave out --reverse and --output")
    if one_way and reverse is not None:
        raise HeedError("--one-way reads this model alone: leave out --reverse")
    if reverse is not None and options.tgt_units != "words":
        raise HeedError("--reverse aligns whitespace words both ways: it needs --tgt-units words")
    if beside is not None and (sweep_all or reverse is not None):
        raise HeedError(f"--beside compares one reading of two models: leave out {'--sweep' if sweep_all else '--reverse'}")
    if sweep_all:
        from heed.viz import figure_format

        figure_format(plot)  # a bad suffix fails before the work
    return options


def _read_golds(gold: Path | None, reference: Path | None, units: list[tuple[int, int]], tgt_units: str, *,
                sides: str) -> tuple[Any, Any]:
    """(sure, possible) of --gold, and every link of --reference (another aligner's: sure or not,
    each counts), each None when not given; both checked against the pairs' word counts `units`."""
    from heed.data.pharaoh import read_gold_for

    hint = "" if tgt_units == "chars" else ", or characters with --tgt-units chars"
    golden = None if gold is None else read_gold_for(gold, units, units=tgt_units, sides=sides, hint=hint)
    theirs = None if reference is None else read_gold_for(reference, units, units=tgt_units, sides=sides, hint=hint)[1]
    return golden, theirs


def _align_all(translator: Translator, src_texts: list[str], tgt_texts: list[str], options: AlignOptions, *,
               batch_size: int, progress: bool | None) -> list[set[tuple[int, int]]]:
    """Every pair's links, in chunks of 16 batches so the progress bar moves."""
    links: list[set[tuple[int, int]]] = []
    with Progress("sentences aligned", total=len(src_texts), enabled=progress) as bar:
        for start in range(0, len(src_texts), batch_size * 16):
            chunk = slice(start, start + batch_size * 16)
            links += [set(a.links) for a in translator.align(src_texts[chunk], tgt_texts[chunk], options=options,
                                                            batch_size=batch_size)]
            bar.advance(len(src_texts[chunk]))
    return links


def _words_asked(options: AlignOptions, join: AlignJoin | None, null_threshold: float | None) -> AlignOptions:
    """`options` with --join and --null-threshold where given (checked by _align_options)."""
    from dataclasses import replace

    if join is not None:
        options = replace(options, join=join.value)
    return options if null_threshold is None else replace(options, null_threshold=null_threshold)


def _recorded_reading_of(translator: Translator, options: AlignOptions, *, given: tuple[Any, ...]) -> AlignOptions:
    """With no reading flag `given`: the model's default reading (Translator.default_reading: the one
    training recorded, or the rule measured for its kind), with the units asked for, said on stderr
    unless it is the plain default. Else `options`."""
    if any(flag is not None for flag in given):
        return options
    chosen, why = translator.default_reading(options.tgt_units)
    if chosen == options:
        return options
    from heed.explain.forced import attention_shape

    stderr().print(f"reading: {chosen.describe(attention_shape(translator.model)[:2])}, {why}; "
                   "--method, --layer, --head or --weights read another way", soft_wrap=True)
    return chosen


def _reading_beside(translator: Translator, other: Translator, options: AlignOptions, *, name: str,
                    default: bool) -> AlignOptions:
    """The reading --beside's model `other` is read with: `options` where it can give them; else, for the
    model's default reading (`default`: no reading flag given; the one training recorded, or the rule
    measured), the attention `other` reports (an export's, an ensemble's: its heads averaged), said in
    one line on stderr unless it is the same attention (an RNN's one head). A reading flag `other`
    cannot follow is a HeedError naming --beside."""
    from heed.explain.align_methods import AlignOptions, check_selection
    from heed.explain.forced import attention_shape, check_weights

    plain = AlignOptions(method=options.method, tgt_units=options.tgt_units, join=options.join,
                         null_threshold=options.null_threshold)
    grid = attention_shape(translator.model)[:2]
    if grid == (1, 1) and options.weights == "attention":
        return plain  # layer 0, head 0 of one attention is the attention every model reports
    heads = not options.default_attention
    try:
        check_weights(other.model, options.weights, heads=heads)
        if heads:
            check_selection(options, *attention_shape(other.model)[:2])
        return options
    except ValueError as e:
        if not default:
            raise HeedError(f"--beside {name}: {e}") from None
    stderr().print(f"note: --beside {name} cannot give this model's reading ({options.describe(grid)}); it is read "
                   f"by the attention it reports ({'shift-att' if plain.method == 'shift' else 'argmax'})",
                   markup=False, soft_wrap=True)
    return plain


def _reverse_model(translator: Any, model: Path, reverse: Path | None, symmetrize: SymmetrizeHow | None, *,
                   device: str, languages: dict[str, Any], recorded: bool) -> tuple[Any, Symmetrize]:
    """(the reverse model to symmetrise with, or None; how to join): --reverse, else where `recorded`
    the pair heed train --both-directions recorded (stderr says so). A reverse model whose
    vocabularies are not this model's the other way round is refused in one line."""
    from heed.api import Translator
    from heed.checkpoint import find_model_dir
    from heed.explain.align import reverse_mismatch
    from heed.train.pair import PAIR_SYMMETRIZE, recorded_reverse

    how: Symmetrize = PAIR_SYMMETRIZE
    if reverse is None:
        pair = recorded_reverse(find_model_dir(model)) if recorded and model.is_dir() else None
        if pair is None:
            if symmetrize is not None:
                raise HeedError("--symmetrize joins this model's links with a reverse model's: give --reverse MODEL "
                                "(or a model trained with heed train --both-directions)")
            return None, how
        reverse, how = pair
        stderr().print(f"symmetrised with the reverse model its pair records: {reverse} (--one-way: this model "
                       "alone)", markup=False, soft_wrap=True)
    backward = with_pair(Translator.load(reverse, device=device), {"src_lang": languages["tgt_lang"],
                                                                    "tgt_lang": languages["src_lang"]})
    why = reverse_mismatch(translator.codec, backward.codec)
    if why is not None:
        raise HeedError(f"--reverse {reverse}: not this model's other direction: {why}")
    return backward, (symmetrize.value if symmetrize is not None else how)


def _symmetrized(links: list[set[tuple[int, int]]], backward: Any, src_texts: list[str], tgt_texts: list[str],
                 how: Symmetrize, batch_size: int) -> list[set[tuple[int, int]]]:
    """`links` joined by `how` with those of `backward` (trained target -> source; a many-language
    model reads the pair the other way round) reading the pairs the other way by its own default
    reading (its trained heads, its null links)."""
    from heed.explain.align_methods import symmetrize as join

    options, _ = backward.default_reading("words")
    other = backward.align(tgt_texts, src_texts, options=options, batch_size=batch_size)
    return [join(f, {(i, j) for j, i in b.links}, how) for f, b in zip(links, other)]


def _beside(translator: Translator, other: Translator, links: list[set[tuple[int, int]]], src_texts: list[str],
            tgt_texts: list[str], options: AlignOptions, *, given: tuple[Any, ...], batch_size: int, name: str,
            err: bool) -> list[set[tuple[int, int]]]:
    """--beside: `other`'s links on the same pairs, read as `options` read `translator` (its own
    default reading where none of the reading flags `given` is set: _reading_beside), after a line
    saying how far its attention and links are from `translator`'s."""
    options = _reading_beside(translator, other, options, name=name, default=all(flag is None for flag in given))
    besides = [set(a.links) for a in other.align(src_texts, tgt_texts, options=options, batch_size=batch_size)]
    gap = translator.attention_gap(other, src_texts, tgt_texts, batch_size=batch_size)
    changed = sum(len(a ^ b) for a, b in zip(links, besides))
    typer.echo(f"beside {name}: {gap.summary()}; {changed:,} links of {sum(map(len, links)):,} differ "
               "(either side)", err=err)
    return besides


def _write_lines(lines: list[str], output: Path | None) -> None:
    """To stdout, or to `output` written whole."""
    if output is None:
        sys.stdout.writelines(lines)
        sys.stdout.flush()
    else:
        with atomic_open(output) as sink:
            sink.writelines(lines)


class AttributeMethod(str, enum.Enum):
    integrated_gradients = "integrated_gradients"
    grad_x_input = "grad_x_input"


MAX_ATTRIBUTION_PLOTS = 8


@friendly_errors
@language_options
def attribute(
    model: Path = typer.Argument(..., help="Model directory (or a training output directory); not an export."),
    src: Path = typer.Option(..., "--src", help="Source sentences, one per line."),
    tgt: Path | None = typer.Option(None, "--tgt", help="Translations to explain, line-aligned with --src "
                                       "(default: the model's own translations)."),
    output: Path = typer.Option(Path("attribution.json"), "--output", "-o", help="The attributions, as JSON."),
    plot: Path | None = typer.Option(None, "--plot", help="Also draw attention beside attribution (.png, .svg, "
                                        f".pdf) for the first {MAX_ATTRIBUTION_PLOTS} sentences."),
    method: AttributeMethod = typer.Option(AttributeMethod.integrated_gradients, "--method",
                                           help="integrated_gradients (complete; --steps points) or grad_x_input."),
    steps: int = typer.Option(50, "--steps", min=1, max=MAX_ATTRIBUTION_STEPS,
                              help=f"Integrated gradients' integration points (1 to {MAX_ATTRIBUTION_STEPS})."),
    contrast: str | None = typer.Option(None, "--contrast", metavar="OTHER OUTPUT", help="Why this output and "
                                           "not OTHER OUTPUT: attribute log p(output) - log p(OTHER) to the source "
                                           "tokens (--src of one sentence; --contrast-file for several)."),
    contrast_file: Path | None = typer.Option(None, "--contrast-file", help="Like --contrast, one other output "
                                                 "per line, line-aligned with --src."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    progress: bool | None = progress_option(),
    *,
    languages: dict[str, Any],
) -> None:
    """Attribute every output token to the source tokens and the output before it (Captum:
    pip install 'heed-nmt[explain]'), and put it beside the attention.

    With --contrast (or --contrast-file): why the output (--tgt's, or the model's own) and not the
    other one. Each source token's attribution to the difference of the two outputs'
    log-probabilities goes to the JSON (`source`, </s> last; `difference`, `delta`), and each
    sentence's difference and the source tokens that pushed most either way are printed.

    For each sentence the JSON holds the tokens, `source` (output x source attribution, </s> last on
    both axes), `prefix` (output x decoder input), `attention`, the log-probability each output
    token is given, integrated gradients' completeness gap `delta` (sum of attributions minus
    f(input) - f(zero embeddings)) and `agreement`: per output token, the Spearman rank correlation
    of its attention with the magnitude of its source attribution. Prints each sentence's mean
    agreement and largest completeness gap."""
    from heed.api import Translator

    if plot is not None:
        check_figure_path(plot)
    sources, targets = read_sources(src, tgt, empty="there is nothing to attribute to")
    others = _contrasts(contrast, contrast_file, len(sources), plot=plot, src=src)
    translator = Translator.load(model, device=device, **languages)
    warn_long_sources(translator, sources, str(src))
    if targets is not None:
        targets = cut_long_texts(translator, targets, str(tgt))
    if others is not None:
        others = cut_long_texts(translator, others, "--contrast" if contrast is not None else str(contrast_file))
        _contrast(translator, sources, targets, others, method=method.value, steps=steps, output=output,
                  progress=progress, files=given_files(src, tgt))
        return
    results = []
    with Progress("sentences attributed", total=len(sources), enabled=progress) as bar:
        for k, source in enumerate(sources):
            with lines_named(given_files(src, tgt), first=k + 1):
                results += translator.attribute([source], None if targets is None else [targets[k]],
                                                method=method.value, steps=steps)
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
        _plot_attributions(results, method.value, plot)


def _plot_attributions(results: list[Any], method: str, plot: Path) -> None:
    """`heed attribute --plot`: each of the first sentences' attention beside its |attribution|."""
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
        titles.append(f"{number}: |{method}| (row max = 1)")
    figure = attention_grid(items, titles=titles, cols=2, label="attention weight; attribution / row's largest")
    typer.echo(f"figure: {save_figure(figure, plot)}")


def _contrasts(contrast: str | None, contrast_file: Path | None, sources: int, *, plot: Path | None,
               src: Path) -> list[str] | None:
    """The other outputs of --contrast / --contrast-file, one per source, or None without them."""
    if contrast is None and contrast_file is None:
        return None
    if contrast is not None and contrast_file is not None:
        raise HeedError("give the other output once: --contrast TEXT or --contrast-file FILE")
    if plot is not None:
        raise HeedError("--plot draws attention beside attribution; a contrast is one row per sentence, printed and "
                        "in the JSON: leave out --plot")
    if contrast is not None:
        if sources != 1:
            raise HeedError(f"--contrast gives one other output, but {src} holds {sources} sentences; use "
                            "--contrast-file with one other output per line")
        others = [contrast]
    else:
        assert contrast_file is not None  # one of the two is given
        with open_stream(contrast_file) as stream:
            others = list(read_lines(stream, str(contrast_file)))
        if len(others) != sources:
            raise HeedError(f"{contrast_file} has {len(others)} lines but {src} has {sources}: give one other output "
                            "per source line")
    for number, line in enumerate(others, start=1):
        if not line.strip():
            where = "--contrast" if contrast is not None else f"{contrast_file}: line {number}"
            raise HeedError(f"{where} is empty: give the other output to contrast with")
    return others


def _contrast(translator: Translator, sources: list[str], targets: list[str] | None, others: list[str], *,
              method: str, steps: int, output: Path, progress: bool | None, files: dict[str, str]) -> None:
    """`heed attribute --contrast`: every sentence's Contrast to the JSON, a line each on stdout;
    `files` names the files of src_texts and tgt_texts for errors."""
    import json

    import numpy as np

    results = []
    with Progress("sentences contrasted", total=len(sources), enabled=progress) as bar:
        for k, source in enumerate(sources):
            try:
                with lines_named(files, first=k + 1):
                    results += translator.contrast([source], [others[k]], None if targets is None else [targets[k]],
                                                   method=method, steps=steps)  # type: ignore[arg-type]
            except HeedError as e:  # name the line, not the list index
                raise HeedError(str(e).replace("contrasts[0]", f"the other output of line {k + 1}")) from None
            bar.advance(1)
    with atomic_open(output) as sink:
        json.dump([r.to_dict() for r in results], sink, ensure_ascii=False)
        sink.write("\n")
    for number, r in enumerate(results, start=1):
        order = np.argsort(r.source)
        labels = [*r.src_tokens, "</s>"]
        towards = ", ".join(f"{labels[i]} {r.source[i]:+.2f}" for i in order[::-1][:3] if r.source[i] > 0) or "-"
        away = ", ".join(f"{labels[i]} {r.source[i]:+.2f}" for i in order[:3] if r.source[i] < 0) or "-"
        gap = "" if r.delta is None else f"\t|delta| {abs(r.delta):.1e}"
        typer.echo(f"{number}\t{' '.join(r.output_tokens)}\tvs\t{' '.join(r.contrast_tokens)}\t"
                   f"log p difference {r.difference:+.3f}\ttowards the output: {towards}\ttowards the other: {away}{gap}")
    typer.echo(f"contrasts: {output}")


@friendly_errors
@decode_options
@language_options
def faithfulness_command(
    model: Path = typer.Argument(..., help="Model directory (or a training output directory); not an export."),
    src: Path = typer.Option(..., "--src", help="Source sentences, one per line."),
    ref: Path = typer.Option(..., "--ref", help="Reference translations, line-aligned with --src."),
    permute_seed: int = typer.Option(0, "--permute-seed", min=0, help="Seed of the permutations."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write the figures as JSON."),
    batch_size: int = typer.Option(64, "--batch-size", min=1),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    progress: bool | None = progress_option(),
    *,
    decode: dict[str, Any],
    languages: dict[str, Any],
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
    translator = Translator.load(model, device=device, **languages)
    warn_long_sources(translator, [p.src for p in pairs], str(src))
    cfg = resolve_decode(translator, decode)
    with Progress("sentence passes (decoding, or reading as forced)", total=passes(len(pairs), KINDS),
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
    print_table(table)
    if output is not None:
        import json

        with atomic_open(output) as sink:
            json.dump(report.to_dict(), sink, indent=1)
            sink.write("\n")


def _pharaoh_line(links: set[tuple[int, int]]) -> str:
    """Links in target order (then source), as `heed align` always wrote them."""
    from heed.data.pharaoh import to_pharaoh

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


def _print_scores(links: list[set], units: list[tuple[int, int]], what: str, golden: Any,
                  reference: tuple[Path | None, list[set] | None], beside: tuple[Path | None, list[set] | None],
                  *, err: bool) -> None:
    """With a gold, the AER of the model and of the others, each (file, its links or None) of
    --reference and --beside; with a reference, the model's precision, recall and F1 against it
    (a silver measure)."""
    from heed.explain.align import agreement

    (reference_file, theirs), (beside_dir, besides) = reference, beside
    others = ([] if theirs is None else [(str(reference_file), theirs)]) + (
        [] if besides is None else [(f"{beside_dir} (--beside)", besides)])
    if golden is not None:
        _print_aer(links, golden, units, what, others, err=err)
    if theirs is not None:
        found = agreement(links, theirs)
        typer.echo(f"against {reference_file}: precision {found.precision:.4f}  recall {found.recall:.4f}  "
                   f"F1 {found.f1:.4f}   ({found.links} links against its {found.reference}; {what})", err=err)


class SweepMeasure(NamedTuple):
    """What `heed align --sweep` reports: AER against --gold, or agreement F1 against --reference
    (another aligner's links as both sure and possible: then AER = 1 - F1, so one sweep gives both)."""

    name: str  # "AER" or "F1"
    against: str  # "" (the gold) or ", against FILE"
    lower_is_better: bool

    def of(self, aer: Any) -> Any:
        """This measure of an AER: a float, or an array of them (a sweep's grid)."""
        return aer if self.lower_is_better else 1.0 - aer


AER_MEASURE = SweepMeasure("AER", "", True)


def _print_sweep(result: Any, plot: Path, sentences: int, *, default: tuple[AlignOptions, str],
                 measure: SweepMeasure = AER_MEASURE) -> None:
    """`heed align --sweep`: one table of `measure` per method and weighting (layers x heads and
    their means), the best reading, the default one (`default`: Translator.default_reading's reading
    and why, what heed align reads without reading flags), the diagonal, and the heatmap."""
    from rich.table import Table

    from heed.explain.align_methods import METHODS, WEIGHT_NAMES
    from heed.viz import aer_grid, save_figure

    console = Console(highlight=False, soft_wrap=True)
    grids = {("shift-att" if method == "shift" else method) + ("" if weights == "attention" else
                                                                f", {WEIGHT_NAMES[weights]}"):
             measure.of(result.grid(method, weights)) for weights in result.weights for method in METHODS}
    one = result.layers == result.heads == 1
    name_ = measure.name
    for name, grid in grids.items():
        if one:  # an RNN's one attention: nothing to tabulate
            console.print(f"{name}: {name_} = {grid[0, 0]:.4f}   ({sentences} sentences{measure.against})")
            continue
        table = Table(title=f"{name_} % by decoder layer x head ({name}; {sentences} sentences{measure.against})")
        table.add_column("layer")
        for h in range(result.heads):
            table.add_column(f"head {h}", justify="right")
        table.add_column("mean", justify="right")
        for r in range(result.layers + 1):
            table.add_row("mean" if r == result.layers else str(r),
                          *("-" if math.isnan(v) else f"{100 * v:.1f}" for v in grid[r]))
        console.print(table)
    if not one:
        best, best_aer = result.best()
        console.print(f"best: {name_} = {measure.of(best_aer):.4f}   {best.describe()}")
        reading, why = default
        try:
            default_value = f"{name_} = {measure.of(result.aer(reading)):.4f}"
        except KeyError:  # a reading the sweep does not score (several heads' mean)
            default_value = "not among the readings swept"
        console.print(f"default: {default_value}   {reading.describe(result.head_grid)} ({why}: the reading heed "
                      "align uses without --method, --layer, --head or --weights)")
    console.print(f"diagonal baseline: {name_} = {measure.of(result.diagonal.aer):.4f}")
    if one:
        console.print("(one attention: no layer x head heatmap drawn)")
        return
    save_figure(aer_grid(grids, diagonal=measure.of(result.diagonal.aer), title=name_,
                         lower_is_better=measure.lower_is_better), plot)
    console.print(f"heatmap: {plot}")
