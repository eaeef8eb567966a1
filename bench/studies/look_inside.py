"""The worked study of docs/look-inside.md: for each trained model, on a test set with gold
alignments, the AER of every reading (and the diagonal), the faithfulness interventions, and how
attention agrees with integrated-gradients attribution. Prints one markdown section per model.

    python bench/studies/look_inside.py --model runs/demo --src data/test.src --ref data/test.ref \
        --gold data/test.align --tgt-units chars [--model ...] [--attribute 100] [--seed 0]

Every figure is computed by heed's own API (Translator.align_sweep, heed.explain.faithfulness,
Translator.attribute), so `heed align --sweep`, `heed faithfulness` and `heed attribute` give the
same numbers.
"""
from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np
import torch

from heed.api import Translator
from heed.data.pharaoh import read_gold_alignments
from heed.explain.faithfulness import faithfulness


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def study(path: str, src: list[str], ref: list[str], gold: str | None, units: str, attribute: int, seed: int) -> None:
    translator = Translator.load(path, device="cpu")
    cfg = translator.config.model
    kind = cfg.family if cfg.family == "transformer" else f"{cfg.decoder} ({cfg.attention or 'default'} score)"
    print(f"\n### {path}: {kind}, {sum(p.numel() for p in translator.model.parameters()):,} parameters\n")
    if gold is not None:
        sure, possible = read_gold_alignments(gold)
        started = time.perf_counter()
        result = translator.align_sweep(src, ref, sure, possible, tgt_units=units)  # type: ignore[arg-type]
        best, best_aer = result.best()
        print(f"AER over {result.sentences} pairs ({units}), {time.perf_counter() - started:.1f} s:\n")
        print("| reading | AER % |\n|---|---:|")
        print(f"| default (argmax, layer {result.default_layer}, head mean) | "
              f"{100 * result.counts[('attention', 'argmax', result.default_layer, 'mean')].aer:.1f} |")
        print(f"| shift-att, same layer, head mean | {100 * result.counts[('attention', 'shift', result.default_layer, 'mean')].aer:.1f} |")
        print(f"| best: {best.method}, layer {best.layer}, head {best.head} | {100 * best_aer:.1f} |")
        if result.layers * result.heads > 1:
            grid = result.grid("argmax")[: result.layers, : result.heads]
            print(f"| single heads (argmax), best .. worst | {100 * grid.min():.1f} .. {100 * grid.max():.1f} |")
        print(f"| diagonal baseline | {100 * result.diagonal.aer:.1f} |")
    torch.manual_seed(seed)
    started = time.perf_counter()
    report = faithfulness(translator, src, ref, decode=translator.resolve_decode(1), seed=seed)
    print(f"\nFaithfulness, greedy, permutation seed {seed}, {report.sentences} sentences, {report.tokens} output "
          f"tokens, {time.perf_counter() - started:.1f} s; BLEU without intervention {report.bleu:.2f}:\n")
    print("| intervention | mean Δp(y) | mean abs Δp(y) | mean TVD | BLEU | outputs changed |\n|---|---:|---:|---:|---:|---:|")
    for e in report.effects:
        print(f"| {e.kind} | {e.prob_change:+.3f} | {e.abs_prob_change:.3f} | {e.tvd:.3f} | {e.bleu:.2f} | "
              f"{e.changed:.1f}% |")
    if attribute:
        started = time.perf_counter()
        attributions = translator.attribute(src[:attribute], method="integrated_gradients", steps=50)
        rho = np.concatenate([a.agreement() for a in attributions])
        gaps = np.concatenate([np.abs(a.delta) for a in attributions])
        top = np.mean([np.mean(a.attention.argmax(1) == np.abs(a.source).argmax(1)) for a in attributions])
        print(f"\nAttention against integrated gradients (50 points, zero baseline), {len(attributions)} sentences, "
              f"{len(rho)} output tokens, {time.perf_counter() - started:.1f} s: Spearman ρ mean {rho.mean():+.2f}, "
              f"median {np.median(rho):+.2f}; the most-attended source token is the most-attributed one for "
              f"{100 * top:.1f}% of output tokens; completeness gap |δ| median {np.median(gaps):.1e}, "
              f"max {gaps.max():.1e}.")


def test_set_parser(doc: str | None, *, gold_required: bool) -> argparse.ArgumentParser:
    """The options the look-inside benches share: models (--model, repeated), a test set (--src,
    --ref), its gold alignments (--gold) and their target units."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--gold", required=gold_required)
    parser.add_argument("--tgt-units", default="words", choices=["words", "chars"])
    return parser


def main() -> None:
    parser = test_set_parser(__doc__, gold_required=False)
    parser.add_argument("--attribute", type=int, default=100, help="sentences to attribute (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=None, help="only the first N pairs")
    args = parser.parse_args()
    src = Path(args.src).read_text(encoding="utf-8").splitlines()[: args.limit]
    ref = Path(args.ref).read_text(encoding="utf-8").splitlines()[: args.limit]
    gold = args.gold
    if gold is not None and args.limit is not None:
        lines = Path(gold).read_text(encoding="utf-8").splitlines()[: args.limit]
        gold = "/tmp/look_inside_gold.align"
        with open(gold, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    print(f"CPU: {cpu_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    for path in args.model:
        study(path, src, ref, gold, args.tgt_units, args.attribute, args.seed)


if __name__ == "__main__":
    main()
