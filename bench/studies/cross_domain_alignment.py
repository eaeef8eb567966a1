"""What generalises: alignment on text unlike the training data, against eflomal as a silver reference
(issue 54 item 5; docs/look-inside.md, "Text unlike the training data").

Two small French -> English Transformers (2 + 2 layers of 128, 4k pieces a side), each trained on
one thread for --minutes or --steps: one on Tatoeba (manythings fra-eng, 1,000 pairs held out for test), one
on Multi30k's French and English sides (its val is its test). Multi30k is de-en-fr, so the French
side makes the two corpora one language pair, and each model aligns the other's test pairs in its
own direction:

    Tatoeba model  -> Multi30k val (1,014 pairs)        cross-domain
    Multi30k model -> Tatoeba's 1,000 held-out pairs     cross-domain
    each model     -> its own test pairs                 in-domain

The silver reference is eflomal run once over both corpora together (Tatoeba's 167,130 pairs,
Multi30k's 29,000 + 1,014; grow-diag-final), of which the test lines are kept. Each lever is a
function from (the corpus's runs, the pairs) to links, in LEVERS; the table says for each whether it
reads the translator itself or brings in a statistical aligner:

    plain, guided                the model's own reading (heed align's default: the measured rule,
                                 or the trained head). The plain run carries a full-context alignment
                                 layer trained beside it (model.alignment_layer: it reads the
                                 translator detached, so the translator is the plain one, weight for
                                 weight), read here by the measured rule
    + null links                 the guided reading with a null threshold, chosen in-domain
    + both directions            the guided model symmetrised with its reverse (guided as well,
                                 trained by `heed train --both-directions`), by the rule chosen
                                 in-domain among grow-diag-final, intersect and union
    priors                       eflomal on the test pairs alone with the priors of the model's
                                 training corpus (`heed align --aligner priors`)
    layer                        the plain run's alignment layer (heed align's default for it)
    both                         the guided head's reading, or the layer's, joined with the priors'
                                 links by `--aligner both`'s rules (intersect, union, fill,
                                 grow-diag-final, the product at weights 0.5-8, arbitrate at shares
                                 0-0.2), the rule chosen in-domain (`joins`; every rule's F1 is printed)
    both: arbitrate              eflomal's two directions joined by grow-diag-final with the model
                                 deciding the links they dispute (`--combine arbitrate`), the share
                                 chosen in-domain; with the priors alone and fill at null 0.9, also on
                                 PRIORS_SAMPLES more eflomal samples, each rule on the same sample
    both: guide                  measured, not in heed (guide_rule.py): eflomal on the test pairs with
                                 the priors and the model's reading of them as extra lexical counts,
                                 the weight chosen in-domain
    all                          null links + both directions, then x priors

Markup: each test pair's source gets a random inline tag around a random phrase (1-3 words) of
words eflomal links; the tag's gold span in the target is the span eflomal's links give, and heed's
placement (heed.markup.carry_many onto the reference, forced) is scored by word F1 against it.

    python bench/studies/cross_domain_alignment.py --out runs/xdomain [--minutes 10 | --steps 800] [--seed 1] [--jobs 2]
        [--one-way]   (no reverse models: the both-directions and all rows left out)

Prints the tables (markdown) and writes OUT/cross_domain.json.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from align_priors import cpu
from alignment_readings import heed_train

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data"
SMALL = {"model.layers": "2", "model.d_model": "128", "model.ff_size": "512", "model.heads": "4",
         "data.tokenizer.src.vocab_size": "4000", "data.tokenizer.tgt.vocab_size": "4000",
         "data.batch_tokens": "1000", "train.lr": "0.002", "train.schedule.warmup_steps": "100", "train.threads": "1",
         "train.epochs": "100", "train.early_stopping.patience": "null", "decode.beam_size": "1",
         "train.keep_checkpoints": "1"}
RECIPES = {  # corpus -> (recipe, overrides in DATA_DIR): both French -> English from the files prepare() writes
    "tatoeba": ("tatoeba_fra_eng_transformer.yaml",
                {"data.train": "{src: DATA_DIR/tatoeba.fr, tgt: DATA_DIR/tatoeba.en}", "data.reverse": "false",
                 "train.eval_every": "1000000"}),
    "multi30k": ("multi30k_de_en_transformer.yaml",
                 {"data.train": "{src: DATA_DIR/multi30k-train.fr, tgt: DATA_DIR/multi30k-train.en}",
                  "data.dev": "{src: DATA_DIR/multi30k-val.fr, tgt: DATA_DIR/multi30k-val.en}",
                  "data.test": "{src: DATA_DIR/multi30k-val.fr, tgt: DATA_DIR/multi30k-val.en}",
                  "train.eval_every": "1000000"}),
}
OTHER = {"tatoeba": "multi30k", "multi30k": "tatoeba"}


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def write(path: Path, rows: list[str]) -> None:
    path.write_text("".join(f"{row}\n" for row in rows), encoding="utf-8")


def prepare(data: Path) -> None:
    """The corpora as French / English files, and eflomal's links: each training corpus alone (the
    guided runs' supervision, with its priors) and both corpora together (the silver reference)."""
    data.mkdir(parents=True, exist_ok=True)
    if not (data / "tatoeba.fr").exists():
        pairs = [line.split("\t")[:2] for line in lines(DATA / "tatoeba-fra-eng" / "fra.txt")]
        write(data / "tatoeba.en", [en for en, _ in pairs])
        write(data / "tatoeba.fr", [fr for _, fr in pairs])
        for split in ("train", "val"):
            for lang in ("fr", "en"):
                write(data / f"multi30k-{split}.{lang}", lines(DATA / "multi30k" / f"{split}.{lang}"))
        for lang in ("fr", "en"):
            write(data / f"both.{lang}", lines(data / f"tatoeba.{lang}") + lines(data / f"multi30k-train.{lang}")
                  + lines(data / f"multi30k-val.{lang}"))
    heed = [sys.executable, "-m", "heed", "data", "align"]
    for name, src in (("multi30k-train", "multi30k-train"), ("tatoeba", "tatoeba")):
        corpus = name.split("-")[0]
        if not (data / f"{corpus}.priors").exists():
            subprocess.run([*heed, "--src", str(data / f"{src}.fr"), "--tgt", str(data / f"{src}.en"), "-o",
                            str(data / f"{name}.align"), "--priors-out", str(data / f"{corpus}.priors")], check=True)
    if not (data / "both.align").exists():
        subprocess.run([*heed, "--src", str(data / "both.fr"), "--tgt", str(data / "both.en"), "-o",
                        str(data / "both.align")], check=True)


def run_sets(corpus: str, out: Path, seed: int, budget: dict[str, str]) -> tuple[str, dict[str, str], Path]:
    """(the recipe, its --set overrides, the eflomal links of the training corpus) for `corpus`;
    `budget`: each training's train.max_minutes or train.max_steps."""
    recipe, overrides = RECIPES[corpus]
    data = out / "data"
    supervision = data / ("tatoeba.align" if corpus == "tatoeba" else "multi30k-train.align")
    sets = {**SMALL, **{k: v.replace("DATA_DIR", str(data.resolve())) for k, v in overrides.items()},
            "train.seed": str(seed), **budget}
    return recipe, sets, supervision


def train_plain(corpus: str, out: Path, seed: int, budget: dict[str, str]) -> Path:
    """The plain translator with a full-context alignment layer trained beside it on eflomal's links
    (model.alignment_layer): the layer reads the translator detached and only the layer is trained
    to align, so the translator is the plain run's, weight for weight at the same seed and steps
    (heed.nn.transformer.alignment_layer): one run gives the plain reading and the layer's."""
    recipe, sets, supervision = run_sets(corpus, out, seed, budget)
    return heed_train(recipe, {**sets, "train.alignment": f"{{supervision: {supervision}}}",
                               "model.alignment_layer": "true"}, out / f"{corpus}-plain-layer", out)


def train_guided(corpus: str, out: Path, seed: int, budget: dict[str, str], reverse: bool = True) -> Path:
    """Guided (head 0 of the second-to-last decoder layer trained on eflomal's links) and its reverse,
    guided as well: one `heed train --both-directions`, into CORPUS-guided and CORPUS-guided-reverse
    (without `reverse`, the guided run alone)."""
    recipe, sets, supervision = run_sets(corpus, out, seed, budget)
    guided = out / f"{corpus}-guided"
    if not reverse:
        return heed_train(recipe, {**sets, "train.alignment": f"{{supervision: {supervision}}}"}, guided, out)
    if not (guided / "model" / "heed.json").exists() or not (out / f"{corpus}-guided-reverse" / "model").exists():
        argv = [sys.executable, "-m", "heed", "train", str(REPO / "configs" / recipe), "--both-directions"]
        for key, value in {**sets, "train.alignment": f"{{supervision: {supervision}}}",
                           "output_dir": str(guided)}.items():
            argv += ["--set", f"{key}={value}"]
        started = time.perf_counter()
        with open(out / f"{guided.name}.log", "w", encoding="utf-8") as log:
            subprocess.run(argv, check=True, stdout=log, stderr=subprocess.STDOUT,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
        (guided / "train_seconds").write_text(f"{time.perf_counter() - started:.0f}\n", encoding="utf-8")
    return guided


def train_all(out: Path, seed: int, budget: dict[str, str], jobs: int, reverse: bool = True) -> dict[str, dict[str, Path]]:
    """Every corpus's plain (+ layer) run and guided pair (without `reverse`, the guided run alone),
    `jobs` trainings at a time (one thread each), the two guided pairs first (each is two trainings
    in a row)."""
    work = [(train_guided, c) for c in RECIPES] + [(train_plain, c) for c in RECIPES]
    with ThreadPoolExecutor(jobs) as pool:
        done = list(pool.map(lambda job: (train_guided(job[1], out, seed, budget, reverse) if job[0] is train_guided
                                          else job[0](job[1], out, seed, budget)), work))
    found = dict(zip(work, done))
    return {c: {"plain": found[(train_plain, c)], "layer": found[(train_plain, c)], "guided": found[(train_guided, c)],
                **({"reverse": out / f"{c}-guided-reverse"} if reverse else {})} for c in RECIPES}


# ---- the test sets and the silver reference ------------------------------------------------------

TATOEBA_LINES, MULTI30K_TRAIN = 167_130, 29_000  # both.align: Tatoeba, then Multi30k train, then val


@dataclass
class TestSet:
    name: str
    src: list[str]
    tgt: list[str]
    silver: list[set[tuple[int, int]]]  # eflomal over both corpora together, these lines kept

    @property
    def pairs(self) -> list:  # type: ignore[type-arg]
        from heed.data.corpus import Pair

        return [Pair(s, t) for s, t in zip(self.src, self.tgt)]


def test_sets(out: Path) -> dict[str, TestSet]:
    """Each corpus's test pairs, as eflomal saw them, with their silver links: Multi30k's val, and
    the 1,000 pairs the Tatoeba run held out (its run/data/test.*, found in the corpus by their
    words; the corpus's text, not the run's normalised copy, is aligned)."""
    from heed.data.pharaoh import read_alignments

    data = out / "data"
    silver = read_alignments(data / "both.align")
    fr, en = lines(data / "tatoeba.fr"), lines(data / "tatoeba.en")
    where: dict[tuple[tuple[str, ...], tuple[str, ...]], int] = {}
    for k, (f, e) in enumerate(zip(fr, en)):
        where.setdefault((tuple(f.split()), tuple(e.split())), k)
    held = out / "tatoeba-plain-layer" / "data"
    found = [where[(tuple(f.split()), tuple(e.split()))] for f, e in zip(lines(held / "test.src"), lines(held / "test.tgt"))]
    start = TATOEBA_LINES + MULTI30K_TRAIN
    return {"tatoeba": TestSet("Tatoeba's 1,000 held-out pairs", [fr[k] for k in found], [en[k] for k in found],
                               [silver[k] for k in found]),
            "multi30k": TestSet("Multi30k val (1,014 pairs)", lines(data / "multi30k-val.fr"),
                                lines(data / "multi30k-val.en"), silver[start:start + 1014])}


# ---- the levers ----------------------------------------------------------------------------------

Links = list[set[tuple[int, int]]]


@dataclass
class Case:
    """One model pair's corpus aligning one test set; `chosen`: what was measured in-domain."""

    corpus: str
    test: TestSet
    runs: dict[str, Path]
    data: Path
    chosen: dict
    cache: dict

    def translator(self, run: str):  # type: ignore[no-untyped-def]
        key = ("translator", self.runs[run])
        if key not in self.cache:
            from heed.api import Translator

            self.cache[key] = Translator.load(self.runs[run], device="cpu")
        return self.cache[key]

    def options(self, run: str, reading: str = "default"):  # type: ignore[no-untyped-def]
        """The run's default reading (its trained head, its alignment layer), or with reading
        "measured" the rule measured for its kind of model (what heed align reads of a model that
        records no reading: the plain translator under the layer run's layer), in words."""
        translator = self.translator(run)
        if reading == "default":
            return translator.default_reading("words")[0]
        from heed.explain.align_methods import AlignOptions

        measured = translator.model.measured_reading
        return AlignOptions(method=measured.method, layer=measured.layer, weights=measured.weights, tgt_units="words")

    def readings(self, run: str, *, join: str = "sum", reverse: bool = False, reading: str = "default") -> list:  # type: ignore[type-arg]
        """The run's reading (Case.options) of the test pairs (the other way round for the reverse
        model), pieces joined by `join`, every word linked."""
        key = ("readings", self.runs[run], join, reverse, reading, self.test.name)
        if key not in self.cache:
            options = replace(self.options(run, reading), join=join, null_threshold=0.0)
            src, tgt = (self.test.tgt, self.test.src) if reverse else (self.test.src, self.test.tgt)
            self.cache[key] = self.translator(run).align(src, tgt, options=options)
        return self.cache[key]

    def directions(self):  # type: ignore[no-untyped-def]
        """eflomal's two directions of the test pairs, with the priors of the models' training corpus;
        run once per case (eflomal samples, so every lever and rule reads the same run)."""
        from heed.explain.priors import priors_directions

        key = ("priors directions", self.corpus, self.test.name)
        if key not in self.cache:
            self.cache[key] = priors_directions(self.test.pairs, self.priors())
        return self.cache[key]

    def priors_links(self) -> Links:
        """The two directions joined by grow-diag-final (heed align --aligner priors)."""
        from heed.explain.priors import priors_links

        return priors_links(self.test.pairs, self.priors(), directions=self.directions())

    def priors(self):  # type: ignore[no-untyped-def]
        """The statistical priors of the models' training corpus (heed data align --priors-out)."""
        from heed.explain.priors import read_priors

        key = ("priors", self.corpus)
        if key not in self.cache:
            self.cache[key] = read_priors(self.data / f"{self.corpus}.priors")
        return self.cache[key]


def hard(readings: list, threshold: float = 0.0, *, reverse: bool = False) -> Links:  # type: ignore[type-arg]
    """Links from the readings' word attention, a target word left unlinked below `threshold`
    (heed.explain.align.hard_alignment: heed align's own null rule); the reverse model's turned
    back to (source, target)."""
    from heed.explain.align import hard_alignment

    found = [set(hard_alignment(r.attention, threshold)) for r in readings]
    return [{(j, i) for i, j in f} for f in found] if reverse else found


def plain(case: Case) -> Links:
    return hard(case.readings("plain", reading="measured"))


def guided(case: Case) -> Links:
    return hard(case.readings("guided"))


def null_links(case: Case) -> Links:
    join, threshold = case.chosen["null"]
    return hard(case.readings("guided", join=join), threshold)


def both_directions(case: Case, how: str | None = None) -> Links | None:
    """The guided model symmetrised with its reverse (None without a reverse run: --one-way)."""
    from heed.explain.align_methods import symmetrize

    if "reverse" not in case.runs:
        return None

    how = how or case.chosen["symmetrize"]
    return [symmetrize(f, b, how) for f, b in zip(guided(case), hard(case.readings("reverse", reverse=True),
                                                                     reverse=True))]


def priors(case: Case) -> Links:
    return case.priors_links()


def layer(case: Case) -> Links:
    """The full-context alignment layer, read as heed align reads it by default."""
    return hard(case.readings("layer"))


PRODUCT_WEIGHTS = (0.5, 1.0, 2.0, 4.0, 8.0)
FILL_THRESHOLDS = (0.3, 0.5, 0.7, 0.9)  # `--combine fill --null-threshold T`: heed.explain.align_methods' grid
GUIDE_WEIGHTS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)  # guide_rule.guide_links: counts a target word
ARBITRATE_SHARES = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2)  # arbitrate_links: the model's least share of a row
PRIORS_SAMPLES = 5  # eflomal samples: the priors alone run this many times more, for their spread


def samples(case: Case) -> list:  # type: ignore[type-arg]
    """eflomal's two directions of the case's test pairs: the run every lever reads, then
    PRIORS_SAMPLES more (eflomal samples), each run once."""
    from heed.explain.priors import priors_directions

    key = ("priors samples", case.corpus, case.test.name)
    if key not in case.cache:
        case.cache[key] = [priors_directions(case.test.pairs, case.priors()) for _ in range(PRIORS_SAMPLES)]
    return [case.directions(), *case.cache[key]]


def arbitrate_samples(case: Case, run: str) -> dict[str, list[float]]:
    """F1 % of arbitrate at each of ARBITRATE_SHARES for `run`'s reading, on every sample of samples()."""
    from heed.explain.align import agreement
    from heed.explain.priors import arbitrate_links

    key = ("arbitrate samples", case.runs[run], case.test.name)
    if key not in case.cache:
        readings = case.readings(run)
        case.cache[key] = {f"arbitrate, share {share:g}": [
            100 * agreement([arbitrate_links(f, b, r.attention, share=share) for f, b, r in zip(*found, readings)],
                            case.test.silver).f1 for found in samples(case)] for share in ARBITRATE_SHARES}
    return case.cache[key]


def resampled(case: Case) -> dict[str, list[float]]:
    """F1 % on every sample of samples() (each rule joining the same directions, so the differences
    are paired): the priors alone, and for the guided head and the layer fill at null 0.9 and
    arbitrate at each of ARBITRATE_SHARES."""
    from heed.explain.align import agreement
    from heed.explain.priors import join_links, priors_links

    found: dict[str, list[float]] = {"priors alone": []}
    for directions in samples(case):
        theirs = priors_links(case.test.pairs, case.priors(), directions=directions)
        found["priors alone"].append(100 * agreement(theirs, case.test.silver).f1)
        for run in ("guided", "layer"):
            fill = join_links(hard(case.readings(run), 0.9), theirs, "fill")
            found.setdefault(f"{run}, fill, null 0.9", []).append(100 * agreement(fill, case.test.silver).f1)
    for run in ("guided", "layer"):
        found.update({f"{run}, {rule}": f1 for rule, f1 in arbitrate_samples(case, run).items()})
    return found


def joins(case: Case, run: str) -> dict[str, Links]:
    """Every candidate rule of `--aligner both` for `run`'s default reading (the guided head, or the
    layer) and the priors: intersect, union, fill (the priors' links, the model's for the words
    they leave unlinked; also with the model's null links at each of FILL_THRESHOLDS, so it fills
    only the words it is sure of), grow-diag-final of the two, the product p_model * p_prior^w
    for each w of PRODUCT_WEIGHTS (heed.explain.priors.aligner_links), arbitrate (eflomal's two
    directions joined with the model deciding the links they dispute) at each share of
    ARBITRATE_SHARES, and guide, measured and not in
    heed (eflomal with the priors and the model's reading as w lexical counts a target word, one
    eflomal sample each; guide_rule.guide_links) for each w of GUIDE_WEIGHTS."""
    from guide_rule import guide_links

    from heed.explain.priors import arbitrate_links, join_links, lexical_table, product_links

    key = ("joins", case.runs[run], case.test.name)
    if key not in case.cache:
        readings, theirs = case.readings(run), case.priors_links()
        mine = hard(readings)
        found = {rule: join_links(mine, theirs, rule) for rule in ("intersect", "union", "fill", "grow-diag-final")}
        for threshold in FILL_THRESHOLDS:  # the model fills only the words it links with this share of its row
            found[f"fill, null {threshold:g}"] = join_links(hard(readings, threshold), theirs, "fill")
        table = lexical_table(case.priors())
        for weight in PRODUCT_WEIGHTS:
            found[f"product, w {weight:g}"] = [product_links(r, table, units="words", weight=weight) for r in readings]
        for share in ARBITRATE_SHARES:
            found[f"arbitrate, share {share:g}"] = [arbitrate_links(f, b, r.attention, share=share)
                                                    for f, b, r in zip(*case.directions(), readings)]
        for weight in GUIDE_WEIGHTS:
            found[f"guide, w {weight:g}"] = guide_links(case.test.pairs, readings, case.priors(), weight=weight)
        case.cache[key] = found
    return case.cache[key]


def chosen_join(reading: str, choice: str) -> Callable[[Case], Links]:
    """A lever: `--aligner both` on `reading` ("guided": the guided head, "layer": the alignment
    layer) by what the in-domain pairs chose for `choice` ("both": the rule; "arbitrate": its
    share; "guide": its weight)."""
    return lambda case: joins(case, reading)[case.chosen[f"{choice} {reading}"]]


def all_together(case: Case) -> Links | None:
    """Null links and both directions, each direction's attention times the priors' lexical
    probability (the product rule of `both`), joined by the symmetrisation chosen in-domain (None
    without a reverse run)."""
    from heed.explain.align_methods import symmetrize
    from heed.explain.priors import lexical_table, product_links

    if "reverse" not in case.runs:
        return None

    join, threshold = case.chosen["null"]
    table = lexical_table(case.priors())
    backwards = {(t, s): p for (s, t), p in table.items()}
    sides = []
    for run, reverse, lexicon in (("guided", False, table), ("reverse", True, backwards)):
        readings = case.readings(run, join=join, reverse=reverse)
        kept = hard(readings, threshold)  # (i, j) in the reading's own direction
        linked = [{j for _, j in k} for k in kept]
        product = [{(i, j) for i, j in product_links(r, lexicon, units="words") if j in keep}
                   for r, keep in zip(readings, linked)]
        sides.append([{(j, i) for i, j in p} for p in product] if reverse else product)
    return [symmetrize(f, b, case.chosen["symmetrize"]) for f, b in zip(*sides)]


READS_MODEL, READS_STATS = "the translator", "the translator + a statistical aligner"
LEVERS: list[tuple[str, str, Callable[[Case], Links | None]]] = [
    ("plain (heed align's default: the measured rule)", READS_MODEL, plain),
    ("guided (the trained head)", READS_MODEL, guided),
    ("guided + null links", READS_MODEL, null_links),
    ("guided + both directions, symmetrised", READS_MODEL, both_directions),
    ("full-context alignment layer (beside the plain translator)", READS_MODEL, layer),
    ("priors alone (eflomal on the pairs, the corpus's priors)", "a statistical aligner", priors),
    ("both: guided x priors (`--aligner both`, the rule chosen in-domain)", READS_STATS, chosen_join("guided", "both")),
    ("both: layer x priors (the rule chosen in-domain)", READS_STATS, chosen_join("layer", "both")),
    ("both: guided, arbitrate (eflomal's directions, the head deciding their disputes; share chosen in-domain)",
     READS_STATS, chosen_join("guided", "arbitrate")),
    ("both: layer, arbitrate (eflomal's directions, the layer deciding their disputes; share chosen in-domain)",
     READS_STATS, chosen_join("layer", "arbitrate")),
    ("both: guided, guide (eflomal + the head's reading as priors, weight chosen in-domain)", READS_STATS,
     chosen_join("guided", "guide")),
    ("both: layer, guide (eflomal + the layer's reading as priors, weight chosen in-domain)", READS_STATS,
     chosen_join("layer", "guide")),
    ("all: null links + both directions, each x priors", READS_STATS, all_together),
]


def choose_in_domain(case: Case) -> dict:
    """The null rule (join x threshold), the symmetrisation and `both`'s rule (for the guided head
    and for the layer) that agree best with eflomal on the model's own test pairs (in-domain), then
    used unchanged on the other corpus; arbitrate's share by its mean F1 over 1 + PRIORS_SAMPLES
    eflomal samples (arbitrate_samples: its shares differ by less than one sample's noise)."""
    from heed.explain.align import agreement
    from heed.explain.align_methods import NULL_THRESHOLDS, SYMMETRIZE

    grid = {(join, t): agreement(hard(case.readings("guided", join=join), t), case.test.silver)
            for join in ("sum", "max") for t in NULL_THRESHOLDS}
    null = max(grid, key=lambda k: grid[k].f1)
    rules = {how: agreement(links, case.test.silver) for how in SYMMETRIZE
             if (links := both_directions(case, how)) is not None}
    both = {run: {rule: agreement(links, case.test.silver) for rule, links in joins(case, run).items()}
            for run in ("guided", "layer")}
    shares = {run: {rule: sum(f1) / len(f1) for rule, f1 in arbitrate_samples(case, run).items()}
              for run in ("guided", "layer")}
    arbitrate = {run: max(found, key=lambda k: found[k]) for run, found in shares.items()}
    return {"null": null, "symmetrize": max(rules, key=lambda k: rules[k].f1) if rules else None,
            "null_grid": {f"{j}/{t:g}": round(100 * a.f1, 2) for (j, t), a in grid.items()},
            "symmetrize_f1": {how: round(100 * a.f1, 2) for how, a in rules.items()},
            **{f"both {run}": max((k for k in found if not k.startswith(("guide", "arbitrate")) or k == arbitrate[run]),
                                  key=lambda k: found[k].f1)
               for run, found in both.items()},
            **{f"arbitrate {run}": arbitrate[run] for run in both},
            "arbitrate_f1": {run: {k: round(v, 2) for k, v in found.items()} for run, found in shares.items()},
            **{f"guide {run}": max((k for k in found if k.startswith("guide")), key=lambda k: found[k].f1)
               for run, found in both.items()}}


# ---- markup placement ----------------------------------------------------------------------------

def tagged_phrases(test: TestSet, seed: int) -> list[tuple[int, str, set[int]]]:
    """(pair, the source with one <b> around a random phrase of 1-3 words, the target words eflomal's
    links put under it: min to max of the words linked to the phrase) for each pair whose phrase
    eflomal links at all; the phrase is drawn among those it links."""
    import html

    rng = random.Random(seed)
    out = []
    for k, (src, links) in enumerate(zip(test.src, test.silver)):
        words = src.split()
        spans = [(a, b) for a in range(len(words)) for b in range(a + 1, min(a + 3, len(words)) + 1)
                 if any(a <= i < b for i, _ in links)]
        if not spans:
            continue
        a, b = rng.choice(spans)
        under = [j for i, j in links if a <= i < b]
        marked = [html.escape(w, quote=False) for w in words]
        marked[a], marked[b - 1] = f"<b>{marked[a]}", f"{marked[b - 1]}</b>"
        out.append((k, " ".join(marked), set(range(min(under), max(under) + 1))))
    return out


def placed_words(output: str) -> set[int]:
    """The target words (whitespace words of the output's text) that the <b> of `output` covers."""
    from lxml import etree
    from markup_dates import placed_tags  # this folder's study: run as a script

    spans = [span for tag, span in placed_tags(output) if tag == "b"]
    if not spans:
        return set()
    start, end = spans[0]
    text = "".join(etree.fromstring(f"<r>{output}</r>").itertext())
    words, at = set(), 0
    for n, word in enumerate(text.split()):
        at = text.index(word, at)
        if at < end and at + len(word) > start:
            words.add(n)
        at += len(word)
    return words


def markup(case: Case, run: str, aligner: str, phrases: list[tuple[int, str, set[int]]]) -> dict:
    """heed's placement (heed.markup.carry_many onto the reference) against eflomal's: tags exact
    and word F1 (micro, over the tags)."""
    from heed.markup import carry_many, parse

    translator = case.translator(run)
    options = case.options(run, "measured" if run == "plain" else "default")  # the plain translator under its layer
    outputs = carry_many(translator, [parse(src, "html") for _, src, _ in phrases],
                         [[case.test.tgt[k]] for k, _, _ in phrases], aligner=aligner,  # type: ignore[arg-type]
                         options=options, priors=None if aligner == "model" else case.priors())
    exact = hits = found = wanted = 0
    for out, (_, _, gold) in zip(outputs, phrases):
        got = placed_words(out)
        exact += got == gold
        hits, found, wanted = hits + len(got & gold), found + len(got), wanted + len(gold)
    precision, recall = hits / max(found, 1), hits / max(wanted, 1)
    return {"tags": len(phrases), "exact": 100 * exact / len(phrases),
            "f1": 100 * 2 * precision * recall / max(precision + recall, 1e-9)}


# ---- the study -----------------------------------------------------------------------------------

def trained(run: Path) -> str:
    """'N updates, test BLEU B' from a run's log."""
    log = (run.parent / f"{run.name}.log")
    if not log.exists():  # the reverse run: in the guided run's log, after it
        log = run.parent / f"{run.name.removesuffix('-reverse')}.log"
    tests = re.findall(r"test \(best model, step (\d+).*?BLEU ([\d.]+)", log.read_text(encoding="utf-8"))
    if not tests:
        return "?"
    step, bleu = tests[-1] if run.name.endswith("-reverse") else tests[0]
    return f"{int(step):,} updates, test BLEU {bleu} (greedy)"


def cells(found) -> str:  # type: ignore[no-untyped-def]
    return "-" if found is None else f"{100 * found.precision:.1f} / {100 * found.recall:.1f} / {100 * found.f1:.1f}"


def sampled_cell(found: dict[str, list[float]], name: str, chosen: dict) -> str:
    """'mean (min-max) +diff' of rule `name`'s F1 over the samples, the diff paired with the priors alone."""
    f1, base = found[name], found["priors alone"]
    diff = "" if name == "priors alone" else f" {sum(a - b for a, b in zip(f1, base)) / len(f1):+.2f}"
    run, _, rule = name.partition(", ")
    picked = "^" if chosen.get(f"arbitrate {run}") == rule else ""
    return f"{sum(f1) / len(f1):.2f} ({min(f1):.1f}-{max(f1):.1f}){diff}{picked}"


def mark(chosen: dict, run: str, rule: str) -> str:
    """'*' for `run`'s rule chosen in-domain, '+' for its guide weight, '^' its arbitrate share."""
    return (("*" if chosen[f"both {run}"] == rule else "") + ("+" if chosen[f"guide {run}"] == rule else "")
            + ("^" if chosen[f"arbitrate {run}"] == rule else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "xdomain")
    parser.add_argument("--seed", type=int, default=1, help="the trainings' seed")
    parser.add_argument("--markup-seed", type=int, default=53, help="the random phrases' seed")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--minutes", type=float, default=10, help="each training's wall-clock budget")
    budget.add_argument("--steps", type=int, help="each training's updates instead (fairer on a shared machine)")
    parser.add_argument("--jobs", type=int, default=2, help="corpora trained at once (one thread each)")
    parser.add_argument("--one-way", action="store_true",
                        help="train no reverse models (the both-directions and all rows left out)")
    args = parser.parse_args()
    data = args.out / "data"
    prepare(data)
    limit = ({"train.max_steps": str(args.steps), "train.max_minutes": "null"} if args.steps
             else {"train.max_minutes": str(args.minutes)})
    runs = train_all(args.out, args.seed, limit, args.jobs, reverse=not args.one_way)
    import torch

    from heed.explain.align import agreement

    torch.set_num_threads(1)
    started = time.perf_counter()
    tests, cache = test_sets(args.out), {}  # type: ignore[var-annotated]
    chosen = {c: choose_in_domain(Case(c, tests[c], runs[c], data, {}, cache)) for c in RECIPES}
    cases = {(c, where): Case(c, tests[OTHER[c] if where == "cross" else c], runs[c], data, chosen[c], cache)
             for c in RECIPES for where in ("cross", "in")}
    rows: dict[str, dict] = {}
    for name, reads, lever in LEVERS:
        rows[name] = {"reads": reads}
        for (c, where), case in cases.items():
            links = lever(case)
            rows[name][f"{c}/{where}"] = None if links is None else agreement(links, case.test.silver)
    from heed.explain.align_methods import SYMMETRIZE

    directions: dict[str, dict] = {}
    for (c, where), case in cases.items():
        if args.one_way:
            break
        silver = case.test.silver
        found = {"forward (guided) alone": agreement(guided(case), silver),
                 "reverse (guided) alone": agreement(hard(case.readings("reverse", reverse=True), reverse=True),
                                                     silver)}
        found.update({f"symmetrised: {how}": agreement(both_directions(case, how), silver)  # type: ignore[arg-type]
                      for how in SYMMETRIZE})
        directions[f"{c}/{where}"] = found
    spread = {f"{c}/{where}": resampled(case) for (c, where), case in cases.items()}
    both_rules = {f"{run}/{c}/{where}": {rule: agreement(links, case.test.silver)
                                         for rule, links in joins(case, run).items()}
                  for (c, where), case in cases.items() for run in ("guided", "layer")}
    placements: dict[str, dict] = {}
    for (c, where), case in cases.items():
        phrases = tagged_phrases(case.test, args.markup_seed)
        choices = [("plain", "model"), ("guided", "model"), ("layer", "model")] + (
            [("guided", "priors"), ("guided", "both"), ("layer", "both")] if where == "cross" else [])
        placements[f"{c}/{where}"] = {f"{run}, aligner {aligner}": markup(case, run, aligner, phrases)
                                      for run, aligner in choices}
    seconds = time.perf_counter() - started
    from heed.explain.priors import BOTH_RULE

    as_json = {"cpu": cpu(), "seed": args.seed, "markup_seed": args.markup_seed, "budget": limit,
               "both_rule": BOTH_RULE,
               "trained": {f"{c}/{r}": trained(p) for c, rs in runs.items() for r, p in rs.items()},
               "chosen": chosen,
               "levers": {n: {k: (v if isinstance(v, str) or v is None else
                                  {"precision": v.precision, "recall": v.recall, "f1": v.f1}) for k, v in r.items()}
                          for n, r in rows.items()},
               "directions": {k: {n: a.f1 for n, a in v.items()} for k, v in directions.items()},
               "both_rules": {k: {n: a.f1 for n, a in v.items()} for k, v in both_rules.items()},
               "priors_samples_f1": spread,
               "markup": placements, "score_seconds": round(seconds)}
    (args.out / "cross_domain.json").write_text(json.dumps(as_json, indent=1), encoding="utf-8")

    print(f"\n{cpu()}; trainings seed {args.seed}, {limit} each on 1 thread; markup seed {args.markup_seed}; "
          f"scored in {seconds:.0f} s; heed's `both` rule (BOTH_RULE): {BOTH_RULE}")
    for key, what in as_json["trained"].items():
        print(f"  {key}: {what}")
    for c, ch in chosen.items():
        print(f"  chosen in-domain for {c}: null links {ch['null'][0]}, threshold {ch['null'][1]:g}; symmetrise "
              f"{ch['symmetrize']} (F1 {ch['symmetrize_f1']}); both: guided {ch['both guided']}, layer "
              f"{ch['both layer']}; guide: guided {ch['guide guided']}, layer {ch['guide layer']}; arbitrate: "
              f"guided {ch['arbitrate guided']}, layer {ch['arbitrate layer']}")
    head = ("| lever | reads | Tatoeba model -> Multi30k val | Multi30k model -> Tatoeba test | in-domain: Tatoeba "
            "-> Tatoeba | in-domain: Multi30k -> Multi30k |")
    print("\nAgreement with eflomal (both corpora together, grow-diag-final): precision / recall / F1 %\n")
    print(head + "\n|---|---|---|---|---|---|")
    order = ("tatoeba/cross", "multi30k/cross", "tatoeba/in", "multi30k/in")
    for name, row in rows.items():
        print(f"| {name} | {row['reads']} | " + " | ".join(cells(row[k]) for k in order) + " |")
    print(f"\nOn 1 + {PRIORS_SAMPLES} eflomal samples (the one above and {PRIORS_SAMPLES} more), every rule joining the "
          "same sample's directions: F1 % mean (min-max) and the mean paired difference from the priors alone "
          "(^ the arbitrate share chosen in-domain, on these means)\n")
    print("| rule | " + " | ".join(order) + " |\n|---|" + "---|" * len(order))
    for name in spread[order[0]]:
        print(f"| {name} | " + " | ".join(sampled_cell(spread[k], name, chosen[k.split('/')[0]]) for k in order) + " |")
    if directions:
        print("\nBoth directions: F1 % of each direction alone and of each symmetrisation\n")
        print("| | " + " | ".join(order) + " |\n|---|" + "---|" * len(order))
    for name in directions.get(order[0], {}):
        print(f"| {name} | " + " | ".join(f"{100 * directions[k][name].f1:.1f}" for k in order) + " |")
    print("\n`both`: F1 % of each rule joining the model's reading with the priors' links (* the rule chosen "
          "in-domain, + the guide weight chosen in-domain, ^ the arbitrate share chosen in-domain)\n")
    print("| reading, rule | " + " | ".join(order) + " |\n|---|" + "---|" * len(order))
    for run in ("guided", "layer"):
        for rule in both_rules[f"{run}/{order[0]}"]:
            print(f"| {run}, {rule} | " + " | ".join(
                f"{100 * both_rules[f'{run}/{k}'][rule].f1:.1f}" + mark(chosen[k.split('/')[0]], run, rule)
                for k in order) + " |")
    print("\nMarkup: one <b> around a random 1-3 word phrase a pair, carried onto the reference; exact / word F1 % "
          "against the span eflomal's links give\n")
    print("| model, aligner | " + " | ".join(order) + " |\n|---|" + "---|" * len(order))
    for choice in placements["tatoeba/cross"]:
        print(f"| {choice} | " + " | ".join(
            f"{placements[k][choice]['exact']:.1f} / {placements[k][choice]['f1']:.1f}" if choice in placements[k]
            else "-" for k in order) + " |")


if __name__ == "__main__":
    main()
