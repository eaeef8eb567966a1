"""What carrying markup costs on top of translating: `heed.markup.translate_markup` of N dates
with a tag on each field, against `Translator.translate` of the same sentences without tags, at
one batch size. Runs are interleaved (plain, markup, plain, ...) and the medians compared, in CPU
time of this process (one torch thread) and in wall time, so another load on the machine moves
both sides alike.

    python bench/studies/markup_speed.py runs/demo [--n 1000] [--batch 64] [--beam 1] [--rounds 5]
"""
from __future__ import annotations

import argparse
import statistics
import time

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
    args = parser.parse_args()
    torch.set_num_threads(1)
    translator = heed.load(args.model, device="cpu")
    splits, golds = generate_dates_aligned(n_train=0, n_dev=0, n_test=args.n, seed=7)
    marked = [tagged(p.src, g[0])[0] for p, g in zip(splits.test, golds.test)]
    plain = [p.src for p in splits.test]
    runs: dict[str, list[tuple[float, float]]] = {"plain": [], "markup": []}
    for _ in range(args.rounds):
        for name, times in runs.items():
            wall, cpu = time.perf_counter(), time.process_time()
            if name == "plain":
                translator.translate(plain, beam=args.beam, batch_size=args.batch)
            else:
                translate_markup(translator, marked, kind="html", beam=args.beam, batch_size=args.batch)
            times.append((time.perf_counter() - wall, time.process_time() - cpu))
    for k, label in ((1, "CPU"), (0, "wall")):
        p, m = (statistics.median(r[k] for r in runs[name]) for name in ("plain", "markup"))
        print(f"{label}: plain {p:.2f} s, markup {m:.2f} s, markup / plain {m / p:.3f}")


if __name__ == "__main__":
    main()
