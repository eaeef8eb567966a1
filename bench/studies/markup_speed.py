"""What carrying markup costs on top of translating: `heed.markup.translate_markup` of N dates
with a tag on each field (or, with --text, the first N lines of a file with a <b> around a random
phrase of one to three words), against `Translator.translate` of the same sentences without tags,
at one batch size. Runs are interleaved (plain, markup, plain, ...) and the medians and means compared, in
CPU time of this process (one torch thread) and in wall time, so another load on the machine moves
both sides alike.

    python bench/studies/markup_speed.py runs/demo [--n 1000] [--batch 64] [--beam 1] [--rounds 5]
    python bench/studies/markup_speed.py MODEL --text multi30k/val.fr [--n 1000] ...
"""
from __future__ import annotations

import argparse
import html
import random
import statistics
import time
from pathlib import Path

import torch
from markup_dates import tagged

import heed
from heed.data.dates import generate_dates_aligned
from heed.markup import translate_markup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--text", type=Path, help="real sentences, one a line, instead of dates")
    args = parser.parse_args()
    torch.set_num_threads(1)
    translator = heed.load(args.model, device="cpu")
    if args.text is None:
        splits, golds = generate_dates_aligned(n_train=0, n_dev=0, n_test=args.n, seed=7)
        marked = [tagged(p.src, g[0])[0] for p, g in zip(splits.test, golds.test)]
        plain = [p.src for p in splits.test]
    else:
        plain = [" ".join(line.split()) for line in args.text.read_text(encoding="utf-8").splitlines()][:args.n]
        marked = [phrase_tagged(line, random.Random(k)) for k, line in enumerate(plain)]
    runs: dict[str, list[tuple[float, float]]] = {"plain": [], "markup": []}
    for _ in range(args.rounds):
        for name, times in runs.items():
            wall, cpu = time.perf_counter(), time.process_time()
            if name == "plain":
                translator.translate(plain, beam=args.beam, batch_size=args.batch)
            else:
                translate_markup(translator, marked, kind="html", beam=args.beam, batch_size=args.batch)
            times.append((time.perf_counter() - wall, time.process_time() - cpu))
    for k, label in ((1, "CPU"), (0, "wall")):  # the mean counts a cost that comes every few rounds (a collection)
        for how, average in (("median", statistics.median), ("mean", statistics.mean)):
            p, m = (average(r[k] for r in runs[name]) for name in ("plain", "markup"))
            print(f"{label} {how}: plain {p:.2f} s, markup {m:.2f} s, markup / plain {m / p:.3f}")


def phrase_tagged(sentence: str, rng: random.Random) -> str:
    """`sentence` (escaped) with a <b> around a random phrase of one to three of its words."""
    words = [html.escape(w, quote=False) for w in sentence.split()]
    if not words:
        return sentence
    a = rng.randrange(len(words))
    b = min(len(words), a + rng.randint(1, 3))
    words[a], words[b - 1] = f"<b>{words[a]}", f"{words[b - 1]}</b>"
    return " ".join(words)


if __name__ == "__main__":
    main()
