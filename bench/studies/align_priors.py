"""Statistical priors at run time (heed.explain.priors) beside the model's own reading, on the dates
task's gold by construction (source words -> target characters).

A tiny RNN is trained on generated dates; eflomal's priors are learned on its training corpus (as
`heed data align --priors-out FILE --priors-units chars` does); then, on --n new pairs, the AER of
the model's default reading, of eflomal with the priors on those pairs alone, and of their
intersection, union, fill, arbitrate at shares (eflomal's two directions joined with the model
deciding the links they dispute), product with weights and guide with weights (eflomal with the model's
reading as extra lexical priors, bench/studies/guide_rule.py: the candidates for the `both` rule). And the time eflomal with priors
takes on the new pairs, beyond the model's forward pass (target: under 1 s for 1,000 pairs).

    python bench/studies/align_priors.py [--train 3000] [--n 1000] [--epochs 4] [--out runs/align-priors] [--reuse]
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import heed
from heed.config import config_from_dict
from heed.data.corpus import Pair
from heed.data.dates import generate_dates_aligned, write_splits
from heed.explain.align import AerCounts
from heed.explain.external import eflomal_directions
from heed.explain.priors import (
    arbitrate_links,
    join_links,
    lexical_table,
    priors_directions,
    priors_links,
    priors_text,
    product_links,
    read_priors,
    unit_text,
)
from heed.train import train


def aer(links, golds) -> float:  # type: ignore[no-untyped-def]
    counts = AerCounts()
    for found, (sure, possible) in zip(links, golds):
        counts.add(found, sure, possible)
    return counts.aer


def cpu() -> str:
    fields = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return (f"{fields.get('model name', platform.processor())} (family {fields.get('cpu family', '?')}, model "
            f"{fields.get('model', '?')}), {len(os.sched_getaffinity(0))} cores usable")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=int, default=3000)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--languages", nargs="+", default=["en", "fr"])
    parser.add_argument("--out", type=Path, default=Path("runs/align-priors"))
    parser.add_argument("--reuse", action="store_true", help="Keep a model already trained in --out.")
    args = parser.parse_args()
    splits, golds = generate_dates_aligned(n_train=args.train, n_dev=100, n_test=args.n, seed=54,
                                           languages=tuple(args.languages), verbose_forms=False)
    paths = write_splits(splits, args.out / "data")
    started = time.perf_counter()
    config = config_from_dict({
        "data": {"train": {"tsv": str(paths["train"])}, "dev": {"tsv": str(paths["dev"])},
                 "test": {"tsv": str(paths["test"])}, "batch_tokens": 2000},
        "model": {"embed_size": 32, "hidden_size": 64, "input_feeding": False, "dropout": 0.1},
        "train": {"epochs": args.epochs, "lr": 0.01, "log_every": 1000, "threads": 2,
                  "early_stopping": {"metric": "exact_match", "patience": None}},
        "decode": {"max_len_b": 12, "max_len_a": 0.0},
        "output_dir": str(args.out / "run"),
    })
    reused = args.reuse and (args.out / "run" / "model").is_dir()
    if not reused:
        train(config)
    trained = time.perf_counter() - started
    translator = heed.load(args.out / "run" / "model", device="cpu")

    started = time.perf_counter()
    corpus = list(splits.train)
    unit_pairs = [Pair(p.src, unit_text(p.tgt, "chars")) for p in corpus]
    forward, backward = eflomal_directions(unit_pairs)
    (args.out / "train.priors").write_text(priors_text(corpus, forward, backward, units="chars"), encoding="utf-8")
    learned = time.perf_counter() - started
    priors = read_priors(args.out / "train.priors")

    test = list(splits.test)
    src, tgt = [p.src for p in test], [p.tgt for p in test]
    options, _ = translator.default_reading("chars")
    started = time.perf_counter()
    readings = translator.align(src, tgt, options=options)
    model = [set(a.links) for a in readings]
    forward_pass = time.perf_counter() - started
    times = []
    for _ in range(3):
        started = time.perf_counter()
        directions = priors_directions(test, priors)
        theirs = priors_links(test, priors, directions=directions)
        times.append(time.perf_counter() - started)
    gold = list(golds.test)
    print(f"CPU: {cpu()}")
    print(f"{'reused the model of' if reused else 'trained'} {args.train:,} pairs x {args.epochs} epochs"
          f"{'' if reused else f' in {trained:.0f} s'}; priors learned in {learned:.1f} s "
          f"({len(priors.lines):,} lines)")
    print(f"{args.n:,} new pairs: model's forward pass + reading {forward_pass:.2f} s; eflomal with priors "
          f"{min(times):.2f} s (best of 3; {', '.join(f'{t:.2f}' for t in times)})")
    print(f"AER  model {aer(model, gold):.4f}  priors {aer(theirs, gold):.4f}  "
          f"intersect {aer(join_links(model, theirs, 'intersect'), gold):.4f}  "
          f"union {aer(join_links(model, theirs, 'union'), gold):.4f}")
    table = lexical_table(priors)
    started = time.perf_counter()
    products = {w: [product_links(r, table, units="chars", weight=w) for r in readings] for w in (0.5, 1.0, 2.0, 4.0)}
    print(f"AER  product (model attention x priors' lexical p^w, {(time.perf_counter() - started) / 4:.2f} s each)  "
          + "  ".join(f"w={w:g} {aer(links, gold):.4f}" for w, links in products.items()))
    print(f"AER  fill {aer(join_links(model, theirs, 'fill'), gold):.4f}")
    print("AER  arbitrate (eflomal's two directions, the model deciding the links they dispute; the last sample's)  "
          + "  ".join(f"share={share:g} "
                      f"{aer([arbitrate_links(f, b, r.attention, share=share) for f, b, r in zip(*directions, readings)], gold):.4f}"
                      for share in ARBITRATE_SHARES))
    started = time.perf_counter()
    from guide_rule import guide_links  # this folder's module: run as a script

    guides = {w: guide_links(test, readings, priors, weight=w) for w in GUIDE_WEIGHTS}
    print(f"AER  guide (eflomal, the model's reading as w lexical counts a unit, "
          f"{(time.perf_counter() - started) / len(GUIDE_WEIGHTS):.2f} s each)  "
          + "  ".join(f"w={w:g} {aer(links, gold):.4f}" for w, links in guides.items()))

    markup(translator, test, gold, priors)


GUIDE_WEIGHTS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
ARBITRATE_SHARES = (0.0, 0.02, 0.05, 0.1, 0.2)


def markup(translator, test, gold, priors) -> None:  # type: ignore[no-untyped-def]
    """Each source word that writes output characters wrapped in its own tag (markup_dates.tagged),
    carried onto the reference by each aligner: tags placed exactly, and the character F1 of the
    placed tags against the characters their words write."""
    from markup_dates import placed_tags, tagged  # this folder's study: run as a script

    from heed.markup import carry_many, parse

    sources, golds_by_tag = zip(*(tagged(p.src, sure) for p, (sure, _) in zip(test, gold)))
    for aligner in ("model", "priors", "both"):
        started = time.perf_counter()
        placed = carry_many(translator, [parse(text, "html") for text in sources], [[p.tgt] for p in test],
                            aligner=aligner, priors=priors)  # type: ignore[arg-type]
        seconds = time.perf_counter() - started
        exact = hits = found = wanted = 0
        for out, want in zip(placed, golds_by_tag):
            got = dict(placed_tags(out))
            for tag, (start, end) in want:
                exact += got.get(tag) == (start, end)
                g_start, g_end = got.get(tag, (0, 0))
                hits += max(0, min(end, g_end) - max(start, g_start))
                found += g_end - g_start
                wanted += end - start
        precision, recall = hits / max(found, 1), hits / max(wanted, 1)
        total = sum(map(len, golds_by_tag))
        print(f"markup {aligner:6s}: {exact}/{total} tags exact = {100 * exact / total:.2f}%, character F1 "
              f"{2 * precision * recall / max(precision + recall, 1e-9):.4f} ({seconds:.1f} s)")


if __name__ == "__main__":
    main()
