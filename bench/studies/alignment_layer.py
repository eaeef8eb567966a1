"""The full-context alignment layer (model.alignment_layer, issue 54 item 3) against the guided head,
and against the same training without either, at the same seed and steps.

    # the dates gold by construction (configs/dates_transformer.yaml): plain, guided head, layer
    python bench/studies/alignment_layer.py dates --out runs/alignment-layer-dates [--epochs 8]
    # text unlike the training data: a Tatoeba fr->en model aligning Multi30k val, against eflomal
    # run over both corpora together (bench/studies/cross_domain_alignment.py writes DATA: the
    # French / English files, tatoeba.align for the supervision and both.align for the reference)
    python bench/studies/alignment_layer.py xdomain --data runs/xdomain/data --out runs/alignment-layer-xdomain \
        [--steps 1200]

Each training is `heed train` in its own process, one thread, run side by side (--jobs). dates:
test AER of heed align's reading (the trained head, or the layer) against the test pairs' gold,
target units characters, and test exact match and BLEU. xdomain: the models are
configs/tatoeba_fra_eng_transformer.yaml made small (2 + 2 layers of 128, 4k pieces a side, as
cross_domain_alignment.py's), guided by eflomal's links on Tatoeba alone; each aligns Multi30k's
1,014 val pairs by its default reading, scored by precision, recall and F1 against both.align's
val lines; and each one's Tatoeba test BLEU.
"""
from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from alignment_readings import dates_gold, heed_train
from look_inside import cpu_name

REPO = Path(__file__).resolve().parents[2]
SMALL = {"model.layers": "2", "model.d_model": "128", "model.ff_size": "512", "model.heads": "4",
         "data.tokenizer.src.vocab_size": "4000", "data.tokenizer.tgt.vocab_size": "4000",
         "data.batch_tokens": "2000", "train.schedule.warmup_steps": "400", "train.threads": "1",
         "train.epochs": "100", "train.early_stopping.patience": "null", "decode.beam_size": "1",
         "train.keep_checkpoints": "1", "train.max_minutes": "null", "train.eval_every": "1000000"}


def trained(config: Path, sets: dict[str, str], run: Path) -> float | None:
    """alignment_readings.heed_train of `config` into `run` (its log beside it, RUN.log); its wall
    seconds, or None for a run trained before they were recorded."""
    heed_train(str(config), sets, run, run.parent)
    recorded = run / "train_seconds"
    return float(recorded.read_text(encoding="utf-8")) if recorded.exists() else None


def test_scores(run: Path) -> dict:
    """The run's test line of metrics.jsonl (BLEU, exact match) and its last step."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    test = [r for r in records if r["kind"] == "test"][-1]
    steps = max(r["step"] for r in records if r["kind"] == "train")
    return {"bleu": test["bleu"], "exact_match": test["exact_match"], "steps": steps}


def dates(args: argparse.Namespace) -> dict:
    from heed.api import Translator
    from heed.data.pharaoh import read_gold_alignments
    from heed.explain.align import AerCounts

    config = REPO / "configs" / "dates_transformer.yaml"
    common = {"train.epochs": str(args.epochs), "train.seed": str(args.seed)}
    runs = {"plain": {}, "guided head": {"train.alignment": "{supervision: task}"},
            "alignment layer": {"model.alignment_layer": "true", "train.alignment": "{supervision: task}"}}
    paths = {name: args.out / name.replace(" ", "-") for name in runs}
    with ThreadPoolExecutor(args.jobs) as pool:
        seconds = dict(zip(runs, pool.map(lambda n: trained(config, {**common, **runs[n]}, paths[n]), runs)))
    task = dates_gold(args.out / "task", Path(config))  # the recipe's test pairs and their gold by construction
    src = (task / "test.src").read_text(encoding="utf-8").splitlines()
    tgt = (task / "test.tgt").read_text(encoding="utf-8").splitlines()
    golds = read_gold_alignments(task / "test.align")
    out = {}
    for name, run in paths.items():
        translator = Translator.load(run / "model", device="cpu")
        options, why = translator.default_reading("chars")
        counts = AerCounts()
        for alignment, sure, possible in zip(translator.align(src, tgt, options=options), *golds):
            counts.add(alignment.links, sure, possible)
        out[name] = {**test_scores(run), "test_aer": counts.aer, "reading": why, "seconds": seconds[name]}
        print(f"| {name} | {out[name]['exact_match']:.1f}% | {out[name]['bleu']:.2f} | {100 * counts.aer:.2f}% "
              f"({why}) | {out[name]['steps']} |", flush=True)
    return out


def xdomain(args: argparse.Namespace) -> dict:
    from heed.api import Translator
    from heed.data.pharaoh import read_gold_alignments
    from heed.explain.align_methods import AlignOptions

    data = args.data.resolve()
    config = REPO / "configs" / "tatoeba_fra_eng_transformer.yaml"
    sets = {**SMALL, "data.train": f"{{src: {data}/tatoeba.fr, tgt: {data}/tatoeba.en}}", "data.reverse": "false",
            "train.seed": str(args.seed), "train.max_steps": str(args.steps)}
    supervision = f"{{supervision: {data}/tatoeba.align}}"
    runs = {"plain": {}, "guided head": {"train.alignment": supervision},
            "alignment layer": {"model.alignment_layer": "true", "train.alignment": supervision}}
    runs = {name: runs[name] for name in args.runs}
    paths = {name: args.out / f"tatoeba-{name.replace(' ', '-')}" for name in runs}
    with ThreadPoolExecutor(args.jobs) as pool:
        seconds = dict(zip(runs, pool.map(lambda n: trained(config, {**sets, **runs[n]}, paths[n]), runs)))
    src = (data / "multi30k-val.fr").read_text(encoding="utf-8").splitlines()
    tgt = (data / "multi30k-val.en").read_text(encoding="utf-8").splitlines()
    # both.align: Tatoeba, Multi30k train, then Multi30k val (cross_domain_alignment.prepare)
    _, every = read_gold_alignments(data / "both.align")
    reference = every[-len(src):]
    out = {}
    for name, run in paths.items():
        translator = Translator.load(run / "model", device="cpu")
        readings = {name: translator.default_reading("words")}
        if name == "alignment layer":  # its translator is the plain run's: read it as a plain model is read
            rule = translator.model.measured_reading
            readings["plain (the layer run's translator)"] = (
                AlignOptions(method=rule.method, layer=rule.layer, weights=rule.weights),
                f"the rule measured for {rule.kind}")
        for row, (options, why) in readings.items():
            hits = found = wanted = 0
            for alignment, ref in zip(translator.align(src, tgt, options=options), reference):
                links = set(alignment.links)
                hits, found, wanted = hits + len(links & ref), found + len(links), wanted + len(ref)
            p, r = hits / max(found, 1), hits / max(wanted, 1)
            f1 = 2 * p * r / max(p + r, 1e-12)
            out[row] = {**test_scores(run), "precision": p, "recall": r, "f1": f1, "reading": why,
                        "seconds": seconds[name]}
            print(f"| {row} | {100 * p:.1f} | {100 * r:.1f} | **{100 * f1:.1f}** | {why} | "
                  f"{out[row]['bleu']:.2f} | {out[row]['steps']} |", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", choices=["dates", "xdomain"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", type=Path, help="xdomain: cross_domain_alignment.py's data folder")
    parser.add_argument("--epochs", type=int, default=8, help="dates: epochs of each run")
    parser.add_argument("--steps", type=int, default=1200, help="xdomain: updates of each run")
    parser.add_argument("--runs", nargs="+", default=["plain", "guided head", "alignment layer"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result = dates(args) if args.study == "dates" else xdomain(args)
    result = {"cpu": cpu_name(), "date": time.strftime("%Y-%m-%d"), "args": {k: str(v) for k, v in vars(args).items()},
              "runs": result}
    (args.out / f"{args.study}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"CPU: {result['cpu']}")


if __name__ == "__main__":
    main()
