"""Attention vs. none, by sentence length: Plain vs. Luong (dot, general) vs. Bahdanau (additive).

Each dataset trains the four decoders with everything else equal (data, tokenizers, sizes, seed,
number of updates), then `heed compare` translates the held-out test set with all four and writes
one table and one BLEU-by-source-length plot. Two trainings run side by side, one thread each.

    .venv/bin/python bench/studies/attention_by_length.py --out runs/attention-by-length --docs docs
    .venv/bin/python bench/studies/attention_by_length.py --datasets dates --epochs-dates 2   # a quicker look

Writes under --out: one training directory per (dataset, model), `{dataset}.test.src/.ref`,
`{dataset}.compare.txt`; and under --docs/figures: `{dataset}-bleu-by-length.png`.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEED = [sys.executable, "-m", "heed"]

MODELS = {  # name -> model overrides; the rest of the config is the dataset's
    "plain": ["model.decoder=plain", "model.attention=null"],
    "luong-dot": ["model.decoder=luong", "model.attention=dot"],
    "luong-general": ["model.decoder=luong", "model.attention=general"],
    "bahdanau-additive": ["model.decoder=bahdanau", "model.attention=additive"],
}


def datasets(args: argparse.Namespace) -> dict[str, tuple[Path, list[str], str]]:
    """name -> (config, overrides shared by the four models, source-length buckets in words)."""
    no_early_stop = ["train.early_stopping.patience=null", "train.early_stopping.target=null"]
    return {
        # Dates with the long verbose forms ("it was a friday, the fifth day of the month of april,
        # in the year nineteen ninety-six"): lengths 1-18 words.
        "dates": (ROOT / "configs" / "demo.yaml",
                  ["data.dates.verbose_forms=true", f"train.epochs={args.epochs_dates}",
                   "model.input_feeding=false", *no_early_stop], "1-2,3-4,5-6,7-12,13+"),
        # Tatoeba fra->eng at a size a CPU trains in minutes: 1 layer, 256 units, 4k unigram pieces.
        "tatoeba": (ROOT / "configs" / "tatoeba_fra_eng.yaml",
                    ["model.encoder_layers=1", "model.decoder_layers=1", "model.hidden_size=256",
                     "model.embed_size=128", "model.dropout=0.2", "model.input_feeding=false",
                     "data.tokenizer.src.vocab_size=4000", "data.tokenizer.tgt.vocab_size=4000",
                     "data.batch_tokens=3000", f"train.max_steps={args.steps_tatoeba}",
                     f"train.eval_every={args.steps_tatoeba}", "decode.beam_size=1", *no_early_stop],
                    "1-4,5-8,9-12,13-16,17+"),
    }


def run(cmd: list[str], log: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with log.open("w", encoding="utf-8") as f:
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(cmd)}; see {log}")


def write_test_set(config: Path, overrides: list[str], out: Path, name: str) -> tuple[Path, Path]:
    """The held-out test pairs the trainings score on, as two line-aligned files."""
    from heed.config import load_config
    from heed.data.codec import load_corpora

    test = load_corpora(load_config(config, overrides).data).test
    src, ref = out / f"{name}.test.src", out / f"{name}.test.ref"
    src.write_text("".join(p.src + "\n" for p in test), encoding="utf-8")
    ref.write_text("".join(p.tgt + "\n" for p in test), encoding="utf-8")
    return src, ref


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "attention-by-length")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs")
    parser.add_argument("--datasets", default="dates,tatoeba")
    parser.add_argument("--epochs-dates", type=int, default=3)
    parser.add_argument("--steps-tatoeba", type=int, default=1000)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.docs / "figures").mkdir(parents=True, exist_ok=True)
    table = datasets(args)
    for name in args.datasets.split(","):
        config, shared, buckets = table[name]
        runs = {model: args.out / f"{name}-{model}" for model in MODELS}

        # this dataset's values bound as defaults: the pool runs the function within this iteration
        def train(model: str, config: Path = config, shared: list[str] = shared, runs: dict[str, Path] = runs,
                  name: str = name) -> None:
            sets = [*shared, *MODELS[model], "train.threads=1"]
            cmd = [*HEED, "train", str(config), "--output-dir", str(runs[model]), "--no-progress"]
            run(cmd + [a for s in sets for a in ("--set", s)], args.out / f"{name}-{model}.train.log")
            print(f"trained {name}/{model}", flush=True)

        with ThreadPoolExecutor(max_workers=2) as pool:  # two at a time: one per core
            list(pool.map(train, [m for m in MODELS if not (runs[m] / "model").is_dir()]))
        src, ref = write_test_set(config, shared, args.out, name)
        plot = args.docs / "figures" / f"{name}-bleu-by-length.png"
        report = args.out / f"{name}.compare.txt"
        run([*HEED, "compare", *map(str, runs.values()), "--names", ",".join(MODELS), "--src", str(src),
             "--ref", str(ref), "--buckets", buckets, "--beam", "1", "--plot", str(plot)], report)
        print(report.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
