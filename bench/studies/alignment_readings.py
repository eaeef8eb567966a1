"""Every alignment reading of every kind of model, guided and unguided, on the dates task's gold by
construction (docs/look-inside.md, "Readings beyond the weights"): an RNN with and without input
feeding, a pre-norm and a post-norm Transformer (2 + 2 layers), each trained plainly and with guided
alignment (`train.alignment: {supervision: task}`), then scored on the 1,000 test pairs with
Translator.align_sweep (AER in target characters) and exact match.

    python bench/studies/alignment_readings.py --out runs/readings [--seed 1] [--only rnn-feeding,...]
        [--epochs-rnn 8] [--epochs-transformer 8] [--jobs 2]

Prints one markdown table: per model, the exact match, the default reading's AER, and per weighting
(attention, value norms, rollout, ALTI+) the best AER over its layers and heads (argmax or shift-att)
with where it is; `heed align --sweep` prints the same grids.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from look_inside import cpu_name

REPO = Path(__file__).resolve().parents[2]
VARIANTS = {
    "rnn-feeding": ("demo.yaml", {"model.input_feeding": "true"}),
    "rnn-no-feeding": ("demo.yaml", {"model.input_feeding": "false"}),
    "transformer-pre": ("dates_transformer.yaml", {"model.layers": "2", "model.norm": "pre"}),
    "transformer-post": ("dates_transformer.yaml", {"model.layers": "2", "model.norm": "post"}),
}


def train_one(name: str, guided: bool, out: Path, seed: int, epochs: int) -> Path:
    """Train one variant with `heed train` (its own process, one thread); the run's directory."""
    config, overrides = VARIANTS[name]
    sets = {**overrides, "train.seed": str(seed), "train.epochs": str(epochs), "train.keep_checkpoints": "1"}
    if guided:  # head 0 of the second-to-last layer (Garg et al.), an RNN's one attention
        sets["train.alignment"] = "{supervision: task}"
    return heed_train(config, sets, out / f"{name}-{'guided' if guided else 'plain'}-s{seed}", out)


def dates_gold(directory: Path, config: Path = REPO / "configs" / "demo.yaml") -> Path:
    """`heed data task dates` into `directory` (the test pairs and their gold by construction, the
    task as `config` sets it), unless it is there already."""
    if not (directory / "test.align").exists():
        subprocess.run([sys.executable, "-m", "heed", "data", "task", "dates", str(directory), "--config", str(config)],
                       check=True, stdout=subprocess.DEVNULL)
    return directory


def heed_train(config: str, sets: dict[str, str], run: Path, log_dir: Path) -> Path:
    """`heed train configs/CONFIG --set KEY=VALUE ...` into `run`, in its own process on one thread,
    its output in LOG_DIR/RUN.log and its seconds in RUN/train_seconds; a run trained before is kept."""
    if (run / "model" / "heed.json").exists():
        return run
    argv = [sys.executable, "-m", "heed", "train", str(REPO / "configs" / config)]
    for key, value in {**sets, "output_dir": str(run)}.items():
        argv += ["--set", f"{key}={value}"]
    started = time.perf_counter()
    with open(log_dir / f"{run.name}.log", "w", encoding="utf-8") as log:
        subprocess.run(argv, check=True, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    (run / "train_seconds").write_text(f"{time.perf_counter() - started:.0f}\n", encoding="utf-8")
    return run


def score(run: Path, gold_dir: Path) -> dict:
    from heed.api import Translator
    from heed.data.pharaoh import read_gold_alignments

    translator = Translator.load(run, device="cpu")
    src = (gold_dir / "test.src").read_text(encoding="utf-8").splitlines()
    tgt = (gold_dir / "test.tgt").read_text(encoding="utf-8").splitlines()
    sure, possible = read_gold_alignments(gold_dir / "test.align")
    outputs = [t.text for t in translator.translate(src)]
    exact = 100 * sum(o == r for o, r in zip(outputs, tgt)) / len(tgt)
    result = translator.align_sweep(src, tgt, sure, possible, tgt_units="chars")
    row = {"exact": exact,
           "default": 100 * result.counts[("attention", "argmax", result.default_layer, "mean")].aer,
           "diagonal": 100 * result.diagonal.aer, "best": {}}
    for weights in result.weights:
        for method in ("argmax", "shift"):
            keys = [k for k in result.readings() if k[0] == weights and k[1] == method]
            best = min(keys, key=lambda k: result.counts[k].aer)
            row["best"][f"{weights}/{method}"] = (100 * result.counts[best].aer, best[2], best[3])
    measured = getattr(translator.model, "measured_reading", None)
    if measured is not None:
        from heed.explain.align_methods import AlignOptions

        options = AlignOptions(method=measured.method, layer=measured.layer, weights=measured.weights,
                               tgt_units="chars")  # type: ignore[arg-type]
        row["rule"] = 100 * result.aer(options)
    recorded = translator.recorded_reading
    row["recorded"] = None if recorded is None else {k: recorded[k] for k in ("method", "layer", "head", "weights")}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "readings")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default=",".join(VARIANTS))
    parser.add_argument("--epochs-rnn", type=int, default=8)
    parser.add_argument("--epochs-transformer", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=2, help="trainings at once (one thread each)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    gold_dir = dates_gold(args.out / "dates")
    jobs = [(name, guided) for name in args.only.split(",") for guided in (False, True)]
    from concurrent.futures import ThreadPoolExecutor

    def run(job: tuple[str, bool]) -> Path:
        name, guided = job
        epochs = args.epochs_transformer if name.startswith("transformer") else args.epochs_rnn
        return train_one(name, guided, args.out, args.seed, epochs)

    with ThreadPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(run, jobs))
    import torch

    torch.set_num_threads(1)
    rows = {}
    for (name, guided), path in zip(jobs, runs):
        rows[(name, guided)] = score(path, gold_dir)
        rows[(name, guided)]["seconds"] = int((path / "train_seconds").read_text()) if (path / "train_seconds").exists() else None
    (args.out / "readings.json").write_text(json.dumps({f"{n}/{'guided' if g else 'plain'}": r
                                                        for (n, g), r in rows.items()}, indent=1), encoding="utf-8")
    print(f"\n{cpu_name()}, seed {args.seed}, 1 thread per training; AER % on the 1,000 test pairs (target "
          "characters); each weighting's best layer x head, argmax / shift-att\n")
    print("| model | training | exact match | default reading | measured rule | attention | value norms | rollout | "
          "ALTI+ | diagonal |")
    print("|---|---|---:|---:|---:|---|---|---|---|---:|")
    for (name, guided), row in rows.items():
        cells = []
        for weights in ("attention", "value_norm", "rollout", "alti"):
            if f"{weights}/argmax" not in row["best"]:
                cells.append("-")
                continue
            parts = []
            for method in ("argmax", "shift"):
                aer, layer, head = row["best"][f"{weights}/{method}"]
                where = "" if name.startswith("rnn") else f" L{layer}" + ("" if head == "mean" else f"h{head}")
                parts.append(f"{aer:.1f}{where}")
            cells.append(" / ".join(parts))
        print(f"| {name} | {'guided' if guided else 'plain'} | {row['exact']:.1f}% | {row['default']:.1f} | "
              f"{row.get('rule', float('nan')):.1f} | " + " | ".join(cells) + f" | {row['diagonal']:.1f} |")


if __name__ == "__main__":
    main()
