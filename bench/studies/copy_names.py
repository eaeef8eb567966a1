"""Copying works (issue 18, item 5): on the generated names task (heed.data.names, word tokens),
train the same small model with and without copy attention (model.copy, See et al. 2017) and count
how many of the test sentences' names, never seen in training, come out exactly.

Names are rare on purpose: `data.vocab.min_freq` keeps every name out of the target vocabulary, so
the model without copy can only learn to write <unk> for a name, while the pointer-generator learns
to copy it (its reference is the name's temporary id in the extended vocabulary).

    python bench/studies/copy_names.py                      # the figures in bench/RESULTS.md
    python bench/studies/copy_names.py --steps 60 --seeds 1 # quicker
"""
from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import torch

from heed import load
from heed.config import config_from_dict
from heed.data.names import copied_names, generate_names
from heed.train import train

NAMES = {"n_train": 1000, "n_dev": 50, "n_test": 500, "train_names": 200, "heldout_names": 150}


def run(*, copy: bool, decoder: str, steps: int, seed: int, directory: Path) -> dict[str, float]:
    raw = {
        "data": {"task": "names", "names": {**NAMES, "seed": seed},
                 "tokenizer": {"src": {"kind": "word"}, "tgt": {"kind": "word"}},
                 "vocab": {"min_freq": 10}, "batch_tokens": 800},
        "model": {"decoder": decoder, "embed_size": 16, "hidden_size": 32, "dropout": 0.0, "copy": copy},
        "train": {"epochs": 1000, "max_steps": steps, "lr": 0.02, "threads": 1, "seed": seed,
                  "label_smoothing": 0.0, "early_stopping": {"metric": "loss", "patience": None}},
        "decode": {"max_len_b": 12, "max_len_a": 0.0},
        "output_dir": str(directory),
    }
    start = time.perf_counter()
    train(config_from_dict(raw))
    seconds = time.perf_counter() - start
    test = generate_names(**NAMES, seed=seed).test
    outputs = [t.text for t in load(directory).translate([e.pair.src for e in test])]
    copied, total = copied_names(test, outputs)
    return {"copied": copied / total, "names": total, "exact": sum(o == e.pair.tgt for o, e in zip(outputs, test)) / len(test),
            "unk": sum("<unk>" in o.split() for o in outputs) / len(test), "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread, "
          f"{args.steps} steps, names task {NAMES}")
    print("| decoder | copy | seed | names copied | exact match | outputs with `<unk>` | train s |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for decoder in ("luong", "bahdanau"):
            for copy in (True, False):
                for seed in range(args.seeds):
                    r = run(copy=copy, decoder=decoder, steps=args.steps, seed=seed,
                            directory=Path(tmp) / f"{decoder}-{copy}-{seed}")
                    print(f"| {decoder} | {'yes' if copy else 'no'} | {seed} | {r['copied']:.1%} of {r['names']} "
                          f"| {r['exact']:.1%} | {r['unk']:.1%} | {r['seconds']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
