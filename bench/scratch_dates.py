"""Benchmark: heed.scratch (NumPy only) trained on the dates task, as in "Deep Learning from
Scratch 2" ch. 8 (batch 128, hidden 256, wordvec 16, Adam, gradient clip 5; the book's data is
45,000 train pairs of 8 English date formats).

Reports seconds per training epoch (evaluation excluded) and held-out (dev) exact match after
each epoch, then test exact match. Targets: >= 99.9% exact match, <= 3 min per epoch on a 2-core CPU.
Data: heed.data.dates, 45,000 train / 5,000 dev / 5,000 test pairs, all five languages (en, fr, de,
es, ko) without the long verbose English phrasings; `--languages en` is closer to the book.

    OMP_NUM_THREADS=2 .venv/bin/python bench/scratch_dates.py --epochs 10      # full run
    OMP_NUM_THREADS=2 .venv/bin/python bench/scratch_dates.py --epochs 1       # timing only
    .venv/bin/python bench/scratch_dates.py --profile 30                       # cProfile 30 batches

--blas-threads N sets OPENBLAS_NUM_THREADS before NumPy loads. On a shared, busy machine one BLAS
thread is much faster than two (two threads spin waiting for each other on these small matrices).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--train-size", type=int, default=45000)
    p.add_argument("--eval-size", type=int, default=5000, help="dev pairs (per epoch) and test pairs (at the end)")
    p.add_argument("--languages", default="en,fr,de,es,ko", help="comma-separated subset of en,fr,de,es,ko")
    p.add_argument("--verbose-forms", action="store_true", help="add long English phrasings")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--embed", type=int, default=16)
    p.add_argument("--score", choices=("dot", "general"), default="dot")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop-at", type=float, default=None, help="stop once dev exact match reaches this (0-1)")
    p.add_argument("--blas-threads", type=int, default=None, help="OPENBLAS_NUM_THREADS for this run")
    p.add_argument("--profile", type=int, default=0, metavar="BATCHES",
                   help="instead of training, cProfile this many batches and print the top functions")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    return p.parse_args(argv)


def profile(args: argparse.Namespace, splits) -> None:
    import cProfile
    import pstats

    import numpy as np

    from heed.scratch import Adam, AttentionSeq2seq, clip_grads
    from heed.scratch.train import batch_rows, char_vocab, encode

    sv, tv = char_vocab([p.src for p in splits.train]), char_vocab([p.tgt for p in splits.train])
    data = encode(splits.train, sv, tv)
    model = AttentionSeq2seq(len(sv), len(tv), embed_size=args.embed, hidden_size=args.hidden,
                             score=args.score, rng=args.seed)
    optimizer = Adam()
    rows = batch_rows(data.src_lengths, args.batch_size, np.random.default_rng(args.seed))[:args.profile]

    def run() -> None:
        for r in rows:
            b = data.batch(r)
            model.forward(b.src, b.src_lengths, b.tgt_in, b.tgt_out)
            model.backward()
            clip_grads(model.grads, 5.0)
            optimizer.update(model.params, model.grads)

    run()  # warm up
    start = time.perf_counter()
    run()
    per_batch = (time.perf_counter() - start) / len(rows)
    batches = -(-len(splits.train) // args.batch_size)
    print(f"{1000 * per_batch:.1f} ms per batch -> about {per_batch * batches:.0f} s per epoch of {batches} batches")
    profiler = cProfile.Profile()
    profiler.runcall(run)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(20)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.blas_threads is not None:
        os.environ["OPENBLAS_NUM_THREADS"] = str(args.blas_threads)  # before NumPy is imported
    import numpy as np

    from heed.scratch.train import encode, exact_match, load_dates, train

    languages = tuple(s.strip() for s in args.languages.split(",") if s.strip())
    env = {
        "python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
        "load_average_at_start": os.getloadavg(),
    }
    print("environment:", env)
    start = time.perf_counter()
    splits = load_dates(train_size=args.train_size, eval_size=args.eval_size, seed=args.seed,
                        languages=languages, verbose_forms=args.verbose_forms)
    print(f"data: {len(splits.train)} train / {len(splits.dev)} dev / {len(splits.test)} test pairs, "
          f"languages {','.join(languages)}, verbose forms {args.verbose_forms} "
          f"({time.perf_counter() - start:.1f} s)")
    if args.profile:
        profile(args, splits)
        return
    trained = train(splits.train, splits.dev, epochs=args.epochs, batch_size=args.batch_size, hidden=args.hidden,
                    embed=args.embed, score=args.score, seed=args.seed, stop_at=args.stop_at)
    history = trained.history
    test_em = exact_match(trained.model, encode(splits.test, trained.src_vocab, trained.tgt_vocab),
                          trained.tgt_vocab)
    seconds = [r.seconds for r in history]
    print(f"\nseconds per epoch: mean {np.mean(seconds):.1f}, min {min(seconds):.1f}, max {max(seconds):.1f}")
    print(f"dev exact match by epoch: {', '.join(f'{100 * r.exact_match:.2f}%' for r in history)}")
    print(f"test exact match after epoch {len(history)}: {100 * test_em:.2f}% on {len(splits.test)} pairs")
    print(f"targets: >= 99.9% exact match {'MET' if test_em >= 0.999 else 'NOT met'}, "
          f"<= 180 s per epoch {'MET' if max(seconds) <= 180 else 'NOT met'}")
    print("load average at end:", os.getloadavg())
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "environment": env, "test_exact_match": test_em,
                       "epochs": [r._asdict() for r in history]}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
