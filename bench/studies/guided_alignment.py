"""Guided alignment on real text: a Transformer recipe trained plainly and with eflomal's links
(`train.alignment.supervision: FILE`), the same number of updates each, side by side; then each
run's test BLEU and every reading's agreement with eflomal on the test pairs (precision, recall,
F1: a silver measure, there being no gold).

    # Tatoeba fra->eng (configs/tatoeba_fra_eng_transformer.yaml)
    heed data align --tsv ../shared/data/tatoeba-fra-eng/fra.txt -o runs/tatoeba.align
    python bench/studies/guided_alignment.py --corpus tatoeba --align runs/tatoeba.align \
        --out runs/tatoeba-guided --steps 4000 [--set model.d_model=128 ...]
    # Multi30k de->en (configs/multi30k_de_en_transformer.yaml)
    heed data align --src ../shared/data/multi30k/train.de --tgt ../shared/data/multi30k/train.en \
        -o runs/multi30k.align
    python bench/studies/guided_alignment.py --corpus multi30k --align runs/multi30k.align \
        --out runs/multi30k-guided --steps 1000 --eval-every 1000

Both trainings run at once, one thread each (`--jobs 1` runs them in turn). `--set` overrides the
recipe for both: a smaller model where the CPU is slow. The test pairs' eflomal links come from
aligning the training pairs and the test pairs together in the model's direction (eflomal needs the
corpus's counts), of which the test lines are kept.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from look_inside import cpu_name

REPO = Path(__file__).resolve().parents[2]


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def tatoeba_pairs(root: Path, run: Path) -> tuple[list[str], list[str], list[str], list[str]]:
    """(train source, train target, test source, test target) in the model's direction: the recipe
    reverses the file's English<TAB>French and holds its test pairs out (written to run/data)."""
    pairs = [line.split("\t")[:2] for line in lines(root / "tatoeba-fra-eng" / "fra.txt")]
    return ([fr for _, fr in pairs], [en for en, _ in pairs], lines(run / "data" / "test.src"),
            lines(run / "data" / "test.tgt"))


def multi30k_pairs(root: Path, run: Path) -> tuple[list[str], list[str], list[str], list[str]]:
    """Multi30k's 29,000 training pairs and its 1,014 val pairs (the recipe's test), German to English."""
    return tuple(lines(root / "multi30k" / f"{split}.{lang}")  # type: ignore[return-value]
                 for split in ("train", "val") for lang in ("de", "en"))


class Corpus(NamedTuple):
    recipe: Path
    pairs: Callable[[Path, Path], tuple[list[str], list[str], list[str], list[str]]]  # (data root, plain run)


CORPORA = {"tatoeba": Corpus(REPO / "configs" / "tatoeba_fra_eng_transformer.yaml", tatoeba_pairs),
           "multi30k": Corpus(REPO / "configs" / "multi30k_de_en_transformer.yaml", multi30k_pairs)}


def train(run: Path, args: argparse.Namespace, guided: bool) -> float | None:
    """One training by `heed train` in its own process; its wall seconds (None: trained earlier)."""
    sets = [f"data.root={args.data_root}", f"output_dir={run}", "train.threads=1", f"train.max_steps={args.steps}",
            "train.max_minutes=null", f"train.eval_every={args.eval_every}", "train.early_stopping.patience=null",
            *args.set]
    if guided:
        sets.append(f"train.alignment={{supervision: {args.align.resolve()}, weight: {args.weight}}}")
    argv = [sys.executable, "-m", "heed", "train", str(CORPORA[args.corpus].recipe)]
    for item in sets:
        argv += ["--set", item]
    if (run / "model" / "heed.json").exists():
        return None
    started = time.perf_counter()
    with open(f"{run}.log", "w", encoding="utf-8") as log:
        subprocess.run(argv, check=True, stdout=log, stderr=subprocess.STDOUT,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    return time.perf_counter() - started


def test_links(plain: Path, args: argparse.Namespace) -> Path:
    """eflomal's links for the test pairs, in the model's direction: the training and test pairs
    aligned together, the test lines kept."""
    out = args.out / "test.eflomal"
    if out.exists():
        return out
    train_src, train_tgt, test_src, test_tgt = CORPORA[args.corpus].pairs(args.data_root, plain)
    src, tgt = train_src + test_src, train_tgt + test_tgt
    (args.out / "all.src").write_text("\n".join(src) + "\n", encoding="utf-8")
    (args.out / "all.tgt").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "heed", "data", "align", "--src", str(args.out / "all.src"), "--tgt",
                    str(args.out / "all.tgt"), "-o", str(args.out / "all.align")], check=True)
    out.write_text("\n".join(lines(args.out / "all.align")[len(train_src):]) + "\n", encoding="utf-8")
    return out


def readings(path: Path, src: list[str], tgt: list[str], reference: list[set]) -> list[tuple[str, float, float, float]]:
    """(reading, precision, recall, F1) against `reference` for the default, the measured rule, the
    recorded reading, and each weighting of each decoder layer (argmax, heads' mean)."""
    from heed.api import Translator
    from heed.explain.align import agreement
    from heed.explain.align_methods import AlignOptions

    translator = Translator.load(path, device="cpu")
    options = {"default (last layer, heads' mean)": AlignOptions(),
               "heed align's reading (the trained head, or the measured rule)": translator.default_reading()[0]}
    for weights in ("attention", "value_norm", "rollout", "alti"):
        for layer in range(translator.model.layers):
            options[f"{weights}, layer {layer}"] = AlignOptions(layer=layer, weights=weights)  # type: ignore[arg-type]
    out = []
    for name, option in options.items():
        links = [set(a.links) for a in translator.align(src, tgt, options=option)]
        found = agreement(links, reference)
        out.append((name, found.precision, found.recall, found.f1))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="tatoeba")
    parser.add_argument("--align", type=Path, required=True,
                        help="eflomal's links of the training corpus as data.train names it (heed data align)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data-root", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--weight", type=float, default=0.05)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], help="a recipe override for both runs")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    args.data_root = args.data_root.resolve()
    runs = {"plain": args.out / "plain", "guided": args.out / "guided"}
    with ThreadPoolExecutor(args.jobs) as pool:
        seconds = dict(zip(runs, pool.map(lambda kv: train(kv[1], args, kv[0] == "guided"), runs.items())))
    import torch

    from heed.data.pharaoh import read_alignments

    torch.set_num_threads(1)
    reference = read_alignments(test_links(runs["plain"], args))
    *_, src, tgt = CORPORA[args.corpus].pairs(args.data_root, runs["plain"])
    print(f"\n{cpu_name()}, {args.steps} updates each, 1 thread each, overrides: {' '.join(args.set) or 'none'}\n")
    for name, run in runs.items():
        log = Path(f"{run}.log").read_text(encoding="utf-8")
        test = re.findall(r"^test .*$", log, flags=re.MULTILINE)
        took = "trained earlier" if seconds[name] is None else f"{seconds[name]:.0f} s"
        print(f"{name}: {test[-1] if test else 'no test line'} ({took})")
    print("\n| reading | plain P / R / F1 | guided P / R / F1 |\n|---|---|---|")
    rows = {name: readings(run, src, tgt, reference) for name, run in runs.items()}
    for (name, *plain), (_, *guided) in zip(rows["plain"], rows["guided"]):
        print(f"| {name} | {' / '.join(f'{100 * v:.1f}' for v in plain)} | {' / '.join(f'{100 * v:.1f}' for v in guided)} |")


if __name__ == "__main__":
    main()
