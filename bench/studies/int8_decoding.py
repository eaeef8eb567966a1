"""What int8 decoding costs in quality (and gains in speed) on trained models: `heed.load(path,
int8=True)` (heed.nn.int8, dynamic int8 products) against the same model in float32.

    OMP_NUM_THREADS=1 .venv/bin/python bench/studies/int8_decoding.py [--work DIR] [--test 1000] [--rounds 3]

Two models are trained briefly on the dates task (1 thread; reused from --work when there): a
2-layer Transformer (d_model 64) and a Luong RNN with input feeding (hidden 64), each on 3,000
pairs. On `--test` unseen dates (another seed), at beam 1 and beam 5, each model decodes in float32
and in int8: corpus BLEU and exact match against the references (heed.evaluate), the share of
int8 outputs that are float32's exactly, and the seconds of `translate` (batch 64), the two
precisions alternating over `--rounds` rounds, the best round of each.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import heed
from heed.data.dates import generate_dates, write_splits
from heed.evaluate import evaluate

MODELS = {
    "transformer": {"family": "transformer", "layers": 2, "d_model": 64, "heads": 4, "ff_size": 128, "dropout": 0.0,
                    "attention_dropout": 0.0},
    "rnn": {"embed_size": 32, "hidden_size": 64, "input_feeding": True, "dropout": 0.0},
}


def train(work: Path, name: str) -> Path:
    from heed.config import config_from_dict
    from heed.train import train as run

    out = work / name
    if (out / "model" / "heed.json").exists():
        return out
    splits = generate_dates(n_train=3000, n_dev=50, n_test=1, seed=7, languages=("en", "fr"), verbose_forms=False)
    paths = write_splits(splits, work / "data")
    schedule = ({"name": "warmup", "warmup_steps": 200, "decay": "none"} if name == "transformer" else
                {"name": "constant"})
    run(config_from_dict({
        "data": {"train": {"tsv": str(paths["train"])}, "dev": {"tsv": str(paths["dev"])}, "batch_tokens": 600},
        "model": MODELS[name],
        "train": {"epochs": 15, "lr": 0.005, "log_every": 100_000, "threads": 1, "schedule": schedule,
                  "early_stopping": {"metric": "exact_match", "patience": None}},
        "decode": {"max_len_b": 12, "max_len_a": 0.0},
        "output_dir": str(out)}))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, default=Path("/tmp/heed-int8-decoding"))
    p.add_argument("--test", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(1)
    args.work.mkdir(parents=True, exist_ok=True)
    pairs = generate_dates(n_train=1, n_dev=1, n_test=args.test, seed=1234, languages=("en", "fr"),
                           verbose_forms=False).test
    sources, references = [q.src for q in pairs], [q.tgt for q in pairs]
    print("| model | beam | float32 BLEU | int8 BLEU | float32 exact | int8 exact | int8 = float32 | "
          "float32 s | int8 s | speed-up |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    for name in MODELS:
        run = train(args.work, name)
        translators = {q: heed.load(run, device="cpu", int8=q) for q in (False, True)}
        for beam in (1, 5):
            best = {False: float("inf"), True: float("inf")}
            outputs: dict[bool, list[str]] = {}
            for r in range(args.rounds):
                for q in ((False, True) if r % 2 == 0 else (True, False)):
                    start = time.perf_counter()
                    outputs[q] = [t.text for t in translators[q].translate(sources, beam=beam, batch_size=64)]
                    best[q] = min(best[q], time.perf_counter() - start)
            scores = {q: evaluate(outputs[q], references) for q in (False, True)}
            same = sum(a == b for a, b in zip(outputs[False], outputs[True])) / len(sources)
            print(f"| {name} | {beam} | {scores[False].bleu:.2f} | {scores[True].bleu:.2f} | "
                  f"{scores[False].exact_match:.1f}% | {scores[True].exact_match:.1f}% | {same:.1%} | "
                  f"{best[False]:.2f} | {best[True]:.2f} | {best[False] / best[True]:.2f}× |", flush=True)


if __name__ == "__main__":
    main()
