"""Subtitles split back over their cues by alignment (heed.markup.subtitles), on a gold by
construction, and what the subtitle path costs over translating the same sentences plainly.

Gold: dates (heed.data.dates.generate_dates_aligned) cut into 2 or 3 cues at word boundaries
where the source's fields come in the target's order (every word before the cut writes target
characters before every word after it: Korean's "2016년 3월 27일", not "27 mars 2016", whose
year comes first in "2016-03-27" and so has no in-order split). A cut's gold target position is
the first character written by the first word of the next cue that writes any: "2016년 | 3월 27일"
-> "2016-" | "03-27". The reference translation is split by the model's alignment (a forced pass,
its recorded reading) and each boundary is right when it falls on exactly that character.

Time: an SRT of `--cues` cues (dates over 1-3 cues each, 2 s between sentences) translated by
translate_subtitles against Translator.translate of its sentences, with the same decoding: wall
and CPU time (the process's, steadier on a shared machine), medians of interleaved runs.

    python bench/studies/subtitles_split.py runs/demo [--n 1000] [--cues 1000] [--languages ko en fr]
"""
from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from collections.abc import Sequence
from datetime import timedelta

import srt
import torch

from heed.data.dates import DATE_LANGUAGES, generate_dates_aligned
from heed.markup.cues import read_cues
from heed.markup.subtitles import carry_cues, ends_sentence, translate_subtitles, units

GAP_IN = 0.2  # seconds between the cues of one sentence
GAP_OUT = 2.0  # and between sentences


def in_order_cuts(src: str, sure: frozenset[tuple[int, int]]) -> list[tuple[int, int]]:
    """(word index a cue starts at, its gold target position) for each word boundary of `src`
    where the words before write only target characters before those the words after write (and
    the word before does not end in a full stop: "95. | 7. 30." would end a sentence there)."""
    words = src.split()
    writes: list[list[int]] = [sorted(j for i, j in sure if i == w) for w in range(len(words))]
    cuts = []
    for b in range(1, len(words)):
        left = [j for w in writes[:b] for j in w]
        right = [j for w in writes[b:] for j in w]
        if left and right and max(left) < min(right) and not ends_sentence(words[b - 1]):
            first = next(w for w in writes[b:] if w)
            cuts.append((b, min(first)))
    return cuts


def gold_cues(src: str, sure: frozenset[tuple[int, int]], rng: random.Random,
              most: int = 3) -> tuple[list[str], list[int]] | None:
    """`src` as 2..`most` cue texts and the gold target position of each cue after the first;
    None when it has no in-order cut. Each cue writes some target character."""
    cuts = in_order_cuts(src, sure)
    if not cuts:
        return None
    count = min(rng.randint(1, most - 1), len(cuts))
    chosen = sorted(rng.sample(cuts, count))
    chosen = [c for k, c in enumerate(chosen) if k == 0 or c[1] > chosen[k - 1][1]]  # each cue writes
    words = src.split()
    edges = [0, *(b for b, _ in chosen), len(words)]
    return [" ".join(words[a:b]) for a, b in itertools.pairwise(edges)], [g for _, g in chosen]


def plain_cues(src: str, rng: random.Random, most: int = 3) -> list[str]:
    """`src` cut at 0..`most`-1 random word boundaries (no gold), none after a full stop."""
    words = src.split()
    free = [b for b in range(1, len(words)) if not ends_sentence(words[b - 1])]
    count = min(rng.randint(1, most), len(free) + 1)
    edges = sorted(rng.sample(free, count - 1)) if count > 1 else []
    edges = [0, *edges, len(words)]
    return [" ".join(words[a:b]) for a, b in itertools.pairwise(edges)]


def build_srt(sentences: Sequence[Sequence[str]]) -> str:
    """An SRT of each sentence's cues, a second a cue, GAP_IN within and GAP_OUT between sentences."""
    subs, at = [], 0.0
    for cues in sentences:
        for k, text in enumerate(cues):
            subs.append(srt.Subtitle(len(subs) + 1, timedelta(seconds=at), timedelta(seconds=at + 1.0), text))
            at += 1.0 + (GAP_IN if k + 1 < len(cues) else GAP_OUT)
    return srt.compose(subs, reindex=False)


def split_accuracy(translator, sources: Sequence[Sequence[str]], references: Sequence[str],
                   golds: Sequence[Sequence[int]]) -> tuple[int, int]:
    """(boundaries exactly right, boundaries) of each reference split over its cues by the
    model's alignment (heed.markup.subtitles.carry_cues), against the gold positions."""
    subs = read_cues(build_srt(sources), "srt")
    groups = units(subs.cues)
    assert [len(g) for g in groups] == [len(s) for s in sources], "the bench's sentences were joined wrongly"
    pieces = carry_cues(translator, subs, groups, list(references))
    right = total = 0
    for group, reference, gold in zip(groups, references, golds):
        got = [pieces[k] or "" for k in group]
        for k, position in enumerate(gold):
            total += 1
            right += "".join(got[:k + 1]) == reference[:position]
    return right, total


def main() -> None:
    import heed

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--n", type=int, default=1000, help="dates generated for the gold")
    parser.add_argument("--cues", type=int, default=1000, help="cues of the timed SRT")
    parser.add_argument("--languages", nargs="+", default=list(DATE_LANGUAGES))
    parser.add_argument("--seed", type=int, default=20261128)
    parser.add_argument("--beam", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=5, help="timings: the median of this many")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: CPU time is steadier on a shared machine)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    translator = heed.load(args.model, device="cpu")
    rng = random.Random(args.seed)
    splits, golds = generate_dates_aligned(n_train=0, n_dev=0, n_test=args.n, seed=args.seed,
                                           languages=tuple(args.languages))
    made = [(gold_cues(p.src, g[0], rng), p.tgt) for p, g in zip(splits.test, golds.test)]
    made = [(m, tgt) for m, tgt in made if m is not None]
    started = time.perf_counter()
    right, total = split_accuracy(translator, [m[0] for m, _ in made], [t for _, t in made], [m[1] for m, _ in made])
    seconds = time.perf_counter() - started
    print(f"{args.model}: {len(made)} of {args.n} dates ({', '.join(args.languages)}) have an in-order cut")
    print(f"  boundaries exactly right onto the reference: {right}/{total} = {100 * right / max(total, 1):.2f}% "
          f"({seconds:.1f} s)")

    sentences, count = [], 0
    for p in splits.test * (1 + args.cues // max(len(splits.test), 1)):
        if count >= args.cues:
            break
        cues = plain_cues(p.src, rng, most=min(3, args.cues - count))
        sentences.append(cues)
        count += len(cues)
    text = build_srt(sentences)
    plain = [" ".join(c) for c in sentences]
    decode = {} if args.beam is None else {"beam": args.beam}
    translator.translate(plain[:64], **decode)  # warm up
    plain_times, subs_times = [], []
    for _ in range(args.repeats):  # interleaved, so that a neighbour's load falls on both
        plain_times.append(timed(lambda: translator.translate(plain, **decode)))
        subs_times.append(timed(lambda: translate_subtitles(translator, text, "srt", **decode)))
    for k, what in enumerate(("wall", "CPU")):
        a, b = statistics.median(t[k] for t in plain_times), statistics.median(t[k] for t in subs_times)
        print(f"  {count} cues ({len(plain)} sentences), {what} time, median of {args.repeats}: plain translate "
              f"{a:.2f} s, subtitles {b:.2f} s = {b / a:.2f}x")


def timed(work) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of `work()`."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


if __name__ == "__main__":
    main()
