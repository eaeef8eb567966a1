"""Does a low ALTI+ source share flag outputs the source did not drive? (docs/look-inside.md, "Source
share as a warning"; Xu et al. 2023 detect hallucinations by it.)

For a trained Transformer and a test set, the sentence source share (Translator.source_share: the
mean over a translation's predictions, at the last decoder layer) of the model's own greedy
outputs for:

    intact      the sources as they are
    truncated   each source without its last whitespace word (a date loses its year, mostly):
                what the model writes for it comes from nowhere in the source
    shuffled    each source's words in a random order
    foreign     another test sentence's output forced on each source (teacher forcing): an
                output that is not this source's translation at all

and how well the share separates them from the intact outputs (ROC AUC: 0.5 = no better than
chance, 1 = every corrupted output below every intact one), and among the intact outputs, wrong
ones from right ones: not the reference (exact match), or with `--poor-chrf X` on real text, a
sentence chrF under X against one of at least X.

    python bench/studies/source_share.py --model runs/readings/transformer-pre-plain-s1 \
        --src dates/test.src --ref dates/test.tgt [--limit 1000] [--seed 0]
    python bench/studies/source_share.py --model runs/multi30k-guided/plain/model \
        --src ../shared/data/multi30k/val.de --ref ../shared/data/multi30k/val.en --poor-chrf 40
"""
from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import numpy as np
from look_inside import cpu_name


def auc(low: np.ndarray, high: np.ndarray) -> float:
    """P(a value of `low` < a value of `high`), ties counted half: the ROC AUC of flagging `low` by
    a small value."""
    low, high = np.asarray(low)[:, None], np.asarray(high)[None, :]
    return float(((low < high).sum() + 0.5 * (low == high).sum()) / (low.size * high.size))


def shares(translator, sources: list[str], outputs: list) -> tuple[np.ndarray, np.ndarray]:
    """Per pair: (the sentence's source share, its lowest token's, </s> left out)."""
    read = translator.source_share(sources, outputs)
    return (np.array([s.sentence for s in read]),
            np.array([s.per_token[:-1].min() if len(s.per_token) > 1 else s.per_token[0] for s in read]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--poor-chrf", type=float, default=None,
                        help="call an output wrong when its sentence chrF is under this "
                             "(not when it differs from the reference)")
    args = parser.parse_args()
    import torch

    from heed.api import Translator

    torch.set_num_threads(1)
    rng = random.Random(args.seed)
    translator = Translator.load(args.model, device="cpu")
    src = Path(args.src).read_text(encoding="utf-8").splitlines()[: args.limit]
    ref = Path(args.ref).read_text(encoding="utf-8").splitlines()[: args.limit]
    started = time.perf_counter()
    outputs = translator.translate(src, beam=1)
    if args.poor_chrf is None:
        right = np.array([o.text == r for o, r in zip(outputs, ref)])
    else:
        from sacrebleu.metrics import CHRF

        chrf = CHRF()
        right = np.array([chrf.sentence_score(o.text, [r]).score >= args.poor_chrf for o, r in zip(outputs, ref)])
    intact, intact_low = shares(translator, src, [o.tokens for o in outputs])
    kept = [k for k, s in enumerate(src) if len(s.split()) > 1]
    truncated_src = [" ".join(src[k].split()[:-1]) for k in kept]
    truncated_out = translator.translate(truncated_src, beam=1)
    truncated, truncated_low = shares(translator, truncated_src, [o.tokens for o in truncated_out])
    shuffled_src = []
    for k in kept:
        words = src[k].split()
        rng.shuffle(words)
        shuffled_src.append(" ".join(words))
    shuffled_out = translator.translate(shuffled_src, beam=1)
    shuffled, shuffled_low = shares(translator, shuffled_src, [o.tokens for o in shuffled_out])
    order = list(range(len(src)))
    rng.shuffle(order)
    foreign, foreign_low = shares(translator, src, [outputs[order[k]].tokens for k in range(len(src))])
    seconds = time.perf_counter() - started
    judged = "exact" if args.poor_chrf is None else f"with a sentence chrF of at least {args.poor_chrf:g}"
    print(f"\n{args.model} on {cpu_name()}, {len(src)} test sources ({right.mean() * 100:.1f}% {judged}), "
          f"seed {args.seed}, "
          f"1 thread, {seconds:.0f} s\n")
    print("| outputs | sentences | mean source share | AUC against intact | lowest token's share, mean | its AUC |")
    print("|---|---:|---:|---:|---:|---:|")
    good, poor = (("right", "wrong") if args.poor_chrf is None
                  else (f"chrF >= {args.poor_chrf:g}", f"chrF < {args.poor_chrf:g}"))
    print(f"| intact, {good} | {right.sum()} | {intact[right].mean():.3f} | - | {intact_low[right].mean():.3f} | - |")
    if (~right).any():
        print(f"| intact, {poor} | {(~right).sum()} | {intact[~right].mean():.3f} | "
              f"{auc(intact[~right], intact[right]):.3f} (against the {good}) | {intact_low[~right].mean():.3f} | "
              f"{auc(intact_low[~right], intact_low[right]):.3f} |")
    for name, values, low in (("truncated source", truncated, truncated_low), ("shuffled source", shuffled, shuffled_low),
                              ("another sentence's output", foreign, foreign_low)):
        print(f"| {name} | {len(values)} | {values.mean():.3f} | {auc(values, intact):.3f} | {low.mean():.3f} | "
              f"{auc(low, intact_low):.3f} |")


if __name__ == "__main__":
    main()
