"""Does quantization move attention? For each model: export it to ONNX in float32 and in int8
(`heed export`, `heed export --int8`), then, on a test set with gold alignments, read every
side's attention on the reference translations (teacher forcing) and report how far the exports'
attention is from PyTorch's (mean |Δ| per cell, the largest, the output tokens whose most-attended
source token moved), the AER of each side's alignment, and each side's greedy BLEU.

    python bench/studies/quantized_attention.py --model runs/demo --src data/test.src --ref data/test.ref \
        --gold data/test.align --tgt-units chars [--model ...]

The figures are heed's own API (Translator.attention_gap, Translator.align, Translator.translate),
so `heed align MODEL --beside EXPORT --gold ...` prints the same ones.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from look_inside import cpu_name, test_set_parser

from heed.api import Translator
from heed.data.pharaoh import read_gold_alignments
from heed.evaluate import evaluate
from heed.explain.align import alignment_error_rate
from heed.explain.align_methods import AlignOptions
from heed.export.onnx import export_model


def study(path: str, src: list[str], ref: list[str], gold: str, units: str, work: Path) -> None:
    model = Translator.load(path, device="cpu")
    cfg = model.config.model
    kind = cfg.family if cfg.family == "transformer" else f"{cfg.decoder} ({cfg.attention or 'default'} score)"
    print(f"\n### {path}: {kind}, {sum(p.numel() for p in model.model.parameters()):,} parameters\n")
    name = Path(path).name
    sides = {"PyTorch float32": model,
             "ONNX float32": Translator.load(export_model(path, work / f"{name}-float32")),
             "ONNX int8": Translator.load(export_model(path, work / f"{name}-int8", int8=True))}
    sure, possible = read_gold_alignments(gold)
    options = AlignOptions(tgt_units=units)  # type: ignore[arg-type]
    outputs = {}
    print("| side | mean abs Δ attention | max abs Δ | most-attended token moved | AER % | BLEU | same output as PyTorch |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, translator in sides.items():
        gap = model.attention_gap(translator, src, ref)
        links = [set(a.links) for a in translator.align(src, ref, options=options)]
        aer = alignment_error_rate(links, sure, possible)
        hyps = translator.translate(src, beam=1)
        outputs[label] = [h.text for h in hyps]
        bleu = evaluate(outputs[label], ref).bleu
        same = sum(a == b for a, b in zip(outputs[label], outputs["PyTorch float32"])) / len(src)
        print(f"| {label} | {gap.mean:.2e} | {gap.max:.2e} | {100 * gap.moved_share:.2f}% of {sum(gap.rows):,} | "
              f"{100 * aer:.2f} | {bleu:.2f} | {100 * same:.1f}% |")


def main() -> None:
    args = test_set_parser(__doc__, gold_required=True).parse_args()
    src = Path(args.src).read_text(encoding="utf-8").splitlines()
    ref = Path(args.ref).read_text(encoding="utf-8").splitlines()
    print(f"CPU: {cpu_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}; "
          f"{len(src)} pairs, attention read on the references (teacher forcing), greedy BLEU")
    with tempfile.TemporaryDirectory() as work:
        for path in args.model:
            study(path, src, ref, args.gold, args.tgt_units, Path(work))


if __name__ == "__main__":
    main()
