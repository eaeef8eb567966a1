"""`heed demo`: the whole toolkit in a few minutes on a laptop CPU.

1. generate the dates task (dates written in English, French, German, Spanish and Korean -> ISO),
2. train a Luong-attention model on it (configs/demo.yaml) with the progress bar,
3. translate the held-out test set: a table of samples in several languages, and exact match,
4. draw where the model looked for a Korean and an English date (an attention heatmap PNG).
"""
from __future__ import annotations

import os
import random
import re
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from heed.config import Config, load_config
from heed.data.corpus import Pair
from heed.data.dates import FIRST_DATE, LAST_DATE
from heed.errors import HeedError
from heed.plumbing.files import atomic_write_text

if TYPE_CHECKING:
    from heed.api import Translation, Translator
    from heed.evaluate import Scores

DEMO_CONFIG = Path("configs") / "demo.yaml"
# --quick: a smoke test of every stage, not the real result.
QUICK_OVERRIDES = ("data.dates.n_train=2000", "data.dates.n_dev=100", "data.dates.n_test=100", "train.epochs=1")

# Words that give a generated date's language away (the task does not label them), checked in
# order; English names that German shares (april, august, september, november) come last.
_LANGUAGE_HINTS = (
    ("ko", re.compile("[\uac00-\ud7a3]")),
    ("es", re.compile(r"\b(enero|febrero|marzo|abril|mayo|junio|julio|agosto|septiembre|octubre|noviembre|"
                      r"diciembre|lunes|martes|miércoles|jueves|viernes|sábado|domingo|de|el)\b", re.IGNORECASE)),
    ("de", re.compile(r"\b(januar|februar|märz|juni|juli|oktober|dezember|montag|dienstag|mittwoch|donnerstag|"
                      r"freitag|samstag|sonntag|am|den|mär|okt|dez)\b|\d\.\s+[^\W\d]", re.IGNORECASE)),
    ("fr", re.compile(r"\b(janv|févr|mars|avr|mai|juin|juil|août|sept|oct|nov|déc|lundi|mardi|mercredi|jeudi|"
                      r"vendredi|samedi|dimanche|le)\b", re.IGNORECASE)),
    ("en", re.compile(r"[^\W\d]")),  # any other letters: the English forms
)


def guess_language(text: str) -> str:
    """"ko", "es", "fr", "en", "de", or "numeric" for a date written in digits only."""
    for language, pattern in _LANGUAGE_HINTS:
        if pattern.search(text):
            return language
    return "numeric"


@dataclass(frozen=True)
class DemoResult:
    output_dir: Path
    exact_match: float  # on the test set, percent
    total: int
    seconds: float
    heatmap: Path | None


def find_demo_config() -> Path:
    """configs/demo.yaml: in the current directory, else beside heed's source tree."""
    for base in (Path.cwd(), Path(__file__).resolve().parents[2]):
        if (base / DEMO_CONFIG).is_file():
            return base / DEMO_CONFIG
    raise HeedError(f"cannot find {DEMO_CONFIG}; run the demo from heed's repository root")


def demo_config(*, output_dir: Path, quick: bool = False, overrides: list[str] | None = None) -> Config:
    overrides = [*(QUICK_OVERRIDES if quick else ()), *(overrides or []), f"output_dir={Path(output_dir).absolute()}"]
    return load_config(find_demo_config(), overrides)


DEMO_MARKER = ".heed-demo"


def heed_command() -> str:
    """How to run this heed from the current directory, for a hint to copy: "heed" when a `heed` is on
    PATH; else the running interpreter's own `heed` script (relative to the current directory when
    under it, e.g. `.venv/bin/heed` of a venv not activated); else `<python> -m heed`."""
    if shutil.which("heed"):
        return "heed"
    # Not resolved: a venv's python is a symlink out of the venv, and its scripts sit beside the link.
    script = Path(sys.executable).parent / ("heed.exe" if os.name == "nt" else "heed")
    if not script.is_file():
        return f"{shlex.quote(sys.executable)} -m heed"
    try:
        relative = script.relative_to(Path.cwd())
    except ValueError:
        return shlex.quote(str(script))
    # A bare "heed" would be looked up on PATH, where it is not.
    return shlex.quote(str(relative) if relative.parent != Path(".") else f"./{relative}")


def _clear_previous_demo(output_dir: Path, console: Console) -> None:
    """Start from an empty directory: replace an earlier demo run, never anything else."""
    if output_dir.exists() and any(output_dir.iterdir()):
        if not (output_dir / DEMO_MARKER).is_file():
            raise HeedError(f"{output_dir}: exists, is not empty and is not a demo run; choose another --output-dir")
        console.print(f"replacing the previous demo run in {output_dir}")
        shutil.rmtree(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / DEMO_MARKER).write_text("written by `heed demo`; the next demo run replaces this directory\n",
                                          encoding="utf-8")


def _pick_samples(pairs: list[Pair], per_language: int = 2, seed: int = 0) -> list[int]:
    """Indices of a few test pairs per language, in a fixed random order."""
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    chosen: dict[str, list[int]] = {}
    for i in order:
        bucket = chosen.setdefault(guess_language(pairs[i].src), [])
        if len(bucket) < per_language:
            bucket.append(i)
    return [i for language in ("en", "fr", "de", "es", "ko", "numeric") for i in chosen.get(language, [])]


def run_demo(*, output_dir: str | Path = "runs/demo", quick: bool = False, overrides: list[str] | None = None,
             console: Console | None = None, progress: bool | None = None) -> DemoResult:
    """Run the four steps (see module doc); returns the test exact match and where things went."""
    from heed.api import Translator
    from heed.train import train

    console = console or Console(highlight=False, soft_wrap=True)
    started = time.perf_counter()
    output_dir = Path(output_dir)
    cfg = demo_config(output_dir=output_dir, quick=quick, overrides=overrides)
    _clear_previous_demo(output_dir, console)
    if cfg.data.task != "dates":
        raise HeedError(f"{find_demo_config()}: the demo needs data.task: dates")
    console.rule("[bold]1. data: the dates task")
    splits, golds, data_dir = _write_data(cfg, output_dir, console)
    from heed.nn.families import family

    console.rule(f"[bold]2. training ({family(cfg.model.family).describe(cfg.model)})")
    train(cfg, console=console, progress=progress)
    console.rule("[bold]3. held-out test set")
    translator = Translator.load(output_dir)
    outputs, scores = _show_test(translator, splits.test, console)
    console.rule("[bold]4. where the model looked")
    heatmap = _show_attention(translator, outputs, splits.test, golds.test, output_dir / "attention.png",
                              data_dir / "test.align", console)
    seconds = time.perf_counter() - started
    _say_what_next(output_dir, data_dir, seconds, console)
    return DemoResult(output_dir, scores.exact_match, scores.total, seconds, heatmap)


def _write_data(cfg: Config, output_dir: Path, console: Console) -> tuple[Any, Any, Path]:
    """Step 1: the dates task's splits and their gold alignments, written to OUTPUT_DIR/data (with
    test.src, test.tgt and test.align for the commands the demo suggests); returns them and the directory."""
    from heed.data.dates import generate_dates_aligned, write_splits
    from heed.data.pharaoh import gold_pharaoh

    d = cfg.data.dates
    splits, golds = generate_dates_aligned(n_train=d.n_train, n_dev=d.n_dev, n_test=d.n_test, seed=d.seed,
                                           languages=tuple(d.languages), verbose_forms=d.verbose_forms)
    data_dir = output_dir / "data"
    write_splits(splits, data_dir)
    atomic_write_text(data_dir / "test.src", "".join(p.src + "\n" for p in splits.test))
    atomic_write_text(data_dir / "test.tgt", "".join(p.tgt + "\n" for p in splits.test))
    atomic_write_text(data_dir / "test.align", "".join(gold_pharaoh(*g) + "\n" for g in golds.test))
    console.print(f"{len(splits.train):,} train / {len(splits.dev):,} dev / {len(splits.test):,} test pairs in "
                  f"{', '.join(d.languages)} (written to {data_dir}), e.g.")
    for pair in splits.train[:4]:
        console.print(f"   {pair.src!r} -> {pair.tgt}")
    return splits, golds, data_dir


def _show_test(translator: Translator, test: list[Pair], console: Console) -> tuple[list[Translation], Scores]:
    """Step 3: translate the test set (greedy), show samples in every language, and score it."""
    from heed.evaluate import evaluate

    outputs = translator.translate([p.src for p in test])
    scores = evaluate([t.text for t in outputs], [p.tgt for p in test])
    table = Table(title="sample test translations (greedy)")
    for name in ("lang", "input", "output", "reference", ""):
        table.add_column(name)
    for i in _pick_samples(test):
        ok = outputs[i].text == test[i].tgt
        table.add_row(guess_language(test[i].src), test[i].src, outputs[i].text, test[i].tgt,
                      "[green]✓[/]" if ok else "[red]✗[/]")
    console.print(table)
    console.print(f"[bold]test exact match: {scores.exact_match:.2f}%[/] ({scores.exact}/{scores.total})   "
                  f"BLEU {scores.bleu:.2f}   chrF {scores.chrf:.2f}")
    return outputs, scores


def _show_attention(translator: Translator, outputs: list[Translation], test: list[Pair], golds: list[Any],
                    heatmap_path: Path, gold_path: Path, console: Console) -> Path | None:
    """Step 4: a heatmap of a Korean and an English date, and the attention's alignment error rate
    against the gold by construction (each source word is known to write certain characters of the
    date), beside the diagonal's. Returns the heatmap's path (None without attention)."""
    from heed.explain.align import alignment_error_rate
    from heed.explain.align_methods import AlignOptions, diagonal_alignment
    from heed.viz import attention_grid, save_figure

    firsts = [next((i for i in range(len(test)) if guess_language(test[i].src) == language), None)
              for language in ("ko", "en")]
    picks = [i for i in firsts if i is not None and outputs[i].attention is not None]
    if not picks:
        return None
    items = [(*outputs[i].labels(), outputs[i].attention) for i in picks]
    heatmap = save_figure(attention_grid(items, titles=[test[i].src for i in picks]), heatmap_path)
    console.print(f"attention heatmap: {heatmap}")
    sure, possible = [set(s) for s, _ in golds], [set(p) for _, p in golds]
    aligned = translator.align([p.src for p in test], [p.tgt for p in test], options=AlignOptions(tgt_units="chars"))
    diagonal = [set(diagonal_alignment(len(p.src.split()), len(p.tgt))) for p in test]
    console.print(f"alignment error rate against the gold by construction ({gold_path}): "
                  f"{100 * alignment_error_rate([set(a.links) for a in aligned], sure, possible):.1f}% "
                  f"(the diagonal, no model: {100 * alignment_error_rate(diagonal, sure, possible):.1f}%)",
                  soft_wrap=True)
    return heatmap


def _say_what_next(output_dir: Path, data_dir: Path, seconds: float, console: Console) -> None:
    first, last = FIRST_DATE.year, LAST_DATE.year
    heed, q = heed_command(), shlex.quote
    # soft_wrap: a command to copy must stay on one line, also when the output is a log 80 columns wide.
    console.print(f"done in {seconds:.0f} s. The model knows dates from {first} to {last} "
                  f"(the task's range). Try:\n"
                  f"  {heed} translate {q(str(output_dir))} <<< 'le 14 juillet 1989'\n"
                  f"  {heed} evaluate {q(str(output_dir))} --src {q(str(data_dir / 'test.src'))} "
                  f"--ref {q(str(data_dir / 'test.tgt'))}\n"
                  f"  {heed} align {q(str(output_dir))} --src {q(str(data_dir / 'test.src'))} "
                  f"--tgt {q(str(data_dir / 'test.tgt'))} --tgt-units chars --gold {q(str(data_dir / 'test.align'))} "
                  f"-o {q(str(data_dir / 'test.hyp.align'))}", soft_wrap=True, markup=False)
