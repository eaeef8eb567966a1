"""Null links and how a source word's pieces join, measured on the dates task's gold by construction
(docs/look-inside.md, section 8, "Null links"): an RNN (configs/demo.yaml) and a 2 + 2 pre-norm
Transformer (configs/dates_transformer.yaml) are trained with `heed train`; training scores the best
reading on the 500 dev pairs' gold and then, for that reading, every join (sum, max) x null threshold
(heed.explain.align_methods.NULL_THRESHOLDS) and records the best in heed.json. This script scores
the 1,000 test pairs (AER, precision, recall; target characters) by the recorded reading with every
unit linked by summed pieces (what heed did before) and as recorded, and prints the whole grid.

    python bench/studies/null_links.py --out runs/null-links [--seed 1] [--epochs 2] [--jobs 2]

Precision is |A & P| / |A| and recall |A & S| / |S| (Och & Ney 2003): leaving a unit unlinked can
only lower |A|, so the question is whether the links it drops were wrong ones.
"""
from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from alignment_readings import dates_gold, heed_train
from look_inside import cpu_name

REPO = Path(__file__).resolve().parents[2]
VARIANTS = {
    "rnn": ("demo.yaml", {}),
    "transformer-pre": ("dates_transformer.yaml", {"model.layers": "2", "model.norm": "pre"}),
}


def train_one(name: str, out: Path, seed: int, epochs: int) -> Path:
    """Train one variant with `heed train` (its own process, one thread); the run's directory."""
    config, overrides = VARIANTS[name]
    sets = {**overrides, "train.seed": str(seed), "train.epochs": str(epochs), "train.keep_checkpoints": "1"}
    return heed_train(config, sets, out / f"{name}-s{seed}-e{epochs}", out)


def score(run: Path, gold_dir: Path) -> dict:
    """The recorded reading on the test gold: every unit linked (sum, 0), as recorded, and the grid."""
    import torch

    from heed.api import Translator
    from heed.data.codec import DevGold
    from heed.data.corpus import Pair
    from heed.data.pharaoh import read_gold_alignments
    from heed.explain.align_methods import recorded_options
    from heed.explain.forced import word_rules

    translator = Translator.load(run, device="cpu")
    src = (gold_dir / "test.src").read_text(encoding="utf-8").splitlines()
    tgt = (gold_dir / "test.tgt").read_text(encoding="utf-8").splitlines()
    sure, possible = read_gold_alignments(gold_dir / "test.align")
    reading = translator.recorded_reading
    assert reading is not None, f"{run}: training recorded no reading (no dev gold?)"
    recorded = recorded_options(reading, "chars")
    plain = replace(recorded, join="sum", null_threshold=0.0)
    gold = DevGold(sure, possible, "chars")
    rules = word_rules(translator.model, translator.codec, [Pair(s, t) for s, t in zip(src, tgt)], gold, plain,
                       device=torch.device("cpu"))

    def figures(join: str, threshold: float) -> dict:
        counts = rules.counts[(join, threshold)]
        return {"aer": 100 * counts.aer, "precision": 100 * counts.precision, "recall": 100 * counts.recall,
                "links": counts.n_a}

    return {"reading": recorded.describe(translator.model.head_grid), "dev_aer": 100 * reading["dev_aer"],
            "dev_aer_all_linked": 100 * reading.get("every_unit_linked_dev_aer", reading["dev_aer"]),
            "join": recorded.join, "null_threshold": recorded.null_threshold,
            "all_linked": figures("sum", 0.0), "recorded": figures(recorded.join, recorded.null_threshold),
            "grid": {f"{j}/{t:g}": figures(j, t) for j, t in rules.counts}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "null-links")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--only", default=",".join(VARIANTS))
    parser.add_argument("--jobs", type=int, default=2, help="trainings at once (one thread each)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    gold_dir = dates_gold(args.out / "dates")
    names = args.only.split(",")
    with ThreadPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(lambda name: train_one(name, args.out, args.seed, args.epochs), names))
    import torch

    torch.set_num_threads(1)
    rows = {}
    for name, run in zip(names, runs):
        started = time.perf_counter()
        rows[name] = score(run, gold_dir)
        rows[name]["score_seconds"] = round(time.perf_counter() - started)
        seconds = run / "train_seconds"
        rows[name]["train_seconds"] = int(seconds.read_text()) if seconds.exists() else None
    (args.out / "null_links.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print(f"\n{cpu_name()}, seed {args.seed}, {args.epochs} epochs, 1 thread per training; the 1,000 test pairs "
          "(target characters); join and null threshold chosen on the 500 dev pairs at training\n")
    print("| model | reading | chosen on dev | all linked: AER / P / R | chosen: AER / P / R | P gained | R lost |")
    print("|---|---|---|---|---|---:|---:|")
    for name, row in rows.items():
        a, c = row["all_linked"], row["recorded"]
        print(f"| {name} | {row['reading']} | {row['join']}, {row['null_threshold']:g} | "
              f"{a['aer']:.1f} / {a['precision']:.1f} / {a['recall']:.1f} | "
              f"{c['aer']:.1f} / {c['precision']:.1f} / {c['recall']:.1f} | "
              f"{c['precision'] - a['precision']:+.1f} | {a['recall'] - c['recall']:.1f} |")
    for name, row in rows.items():
        print(f"\n{name}: AER / precision / recall on test by join / null threshold")
        print("| join | " + " | ".join(k.split("/")[1] for k in row["grid"] if k.startswith("sum/")) + " |")
        print("|---|" + "---|" * sum(k.startswith("sum/") for k in row["grid"]))
        for join in ("sum", "max"):
            cells = [f"{v['aer']:.1f} / {v['precision']:.1f} / {v['recall']:.1f}" for k, v in row["grid"].items()
                     if k.startswith(join + "/")]
            print(f"| {join} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
