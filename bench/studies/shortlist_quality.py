"""What a vocabulary shortlist costs in quality: a trained model's test set translated with and
without its shortlist (counted from its own training corpus, `heed data shortlist`), BLEU
(sacrebleu) and how many outputs are identical, the batches' candidate counts, and the time of each.

    .venv/bin/python bench/studies/shortlist_quality.py MODEL_DIR --train-src F --train-tgt F \
        --test-src F --test-ref F [--k 50] [--common 500] [--beam 5] [--count 1000]

The model directory is copied (its shortlist recorded in the copy). 1 thread.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    for name in ("--train-src", "--train-tgt", "--test-src", "--test-ref"):
        parser.add_argument(name, type=Path, required=True)
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--common", type=int, default=500)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--count", type=int, default=1000)
    args = parser.parse_args()
    import sacrebleu
    import torch

    import heed

    torch.set_num_threads(1)
    sources = args.test_src.read_text(encoding="utf-8").splitlines()[: args.count]
    refs = args.test_ref.read_text(encoding="utf-8").splitlines()[: args.count]
    with tempfile.TemporaryDirectory() as scratch:
        model = Path(scratch) / "model"
        shutil.copytree(args.model, model)
        subprocess.run([sys.executable, "-m", "heed", "data", "shortlist", str(model), "--src", str(args.train_src),
                        "--tgt", str(args.train_tgt), "--k", str(args.k), "--common", str(args.common)], check=True)
        translator = heed.load(model, device="cpu")
        shortlist = translator.shortlist
        assert shortlist is not None
        codec = translator.codec
        ids = [codec.src_ids(codec.src_tokens(s)) for s in sources]
        sizes = [len(shortlist.candidates(ids[k:k + 64])) for k in range(0, len(ids), 64)]
        runs: dict[bool, tuple[list[str], float]] = {}
        for listed in (False, True, False, True):  # interleaved, the second of each kept
            start = time.perf_counter()
            outs = [t.text for t in translator.translate(sources, beam=args.beam, shortlist=listed)]
            runs[listed] = (outs, time.perf_counter() - start)
    full, short = runs[False][0], runs[True][0]
    vocab = len(codec.tgt_vocab)
    print(f"model {args.model}: target vocabulary {vocab:,}; shortlist k {args.k}, common {args.common}, "
          f"{len(shortlist.table):,} source pieces; {len(sources)} test sentences, beam {args.beam}, 1 thread")
    print(f"candidates per batch of 64: mean {sum(sizes) / len(sizes):,.0f} ({sum(sizes) / len(sizes) / vocab:.1%} "
          f"of the vocabulary), max {max(sizes):,}")
    print(f"BLEU without {sacrebleu.corpus_bleu(full, [refs]).score:.2f}, with {sacrebleu.corpus_bleu(short, [refs]).score:.2f}")
    print(f"identical outputs: {sum(a == b for a, b in zip(full, short))}/{len(sources)}")
    print(f"seconds: without {runs[False][1]:.2f}, with {runs[True][1]:.2f} ({runs[False][1] / runs[True][1]:.2f}x)")


if __name__ == "__main__":
    main()
