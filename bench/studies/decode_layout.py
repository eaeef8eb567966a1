"""Before/after for heed.nn.layout: decoding with the decoder's weights in PyTorch's row-major
layout against the column-major one the Translator now uses on the CPU, plus the GEMMs alone.

    OMP_NUM_THREADS=1 .venv/bin/python bench/studies/decode_layout.py MODEL_DIR SOURCES
        [--sentences 200] [--rounds 3] [--threads 1]

Every (beam, batch) setting decodes the same sentences with both layouts, alternating round by
round so that load on a shared machine falls on both alike; the best round of each is reported
(sentences/s), with the speed-up and whether the outputs are identical.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import heed
from heed.nn.layout import column_major, for_decoding

SETTINGS = ((1, 1), (5, 1), (1, 64), (5, 64))  # (beam, batch)
GEMMS = ((1, 192, 512), (5, 192, 512), (5, 256, 512), (5, 512, 2048), (5, 256, 8000), (64, 256, 8000),
         (320, 256, 8000))  # (rows, in, out)


def set_layout(translator: heed.Translator, columns: bool) -> None:
    """columns: heed.nn.layout's layout (the Translator's own); else PyTorch's row-major one."""
    decoder = translator.model.decoder
    if columns:
        for_decoding(decoder)
        return
    for p in decoder.parameters():
        p.data = p.data.contiguous()


def decode_seconds(translator: heed.Translator, texts: list[str], beam: int, batch: int) -> tuple[float, list[str]]:
    start = time.perf_counter()
    with torch.inference_mode():
        out = translator.translate(texts, beam=beam, batch_size=batch, length_penalty=0.0)
    return time.perf_counter() - start, [t.text for t in out]


def gemm_us(rows: int, k: int, n: int, weight_columns: bool, calls: int = 300) -> float:
    x, w, b = torch.randn(rows, k), torch.randn(n, k), torch.randn(n)
    if weight_columns:
        w = column_major(w)
    for _ in range(20):
        torch.nn.functional.linear(x, w, b)
    start = time.perf_counter()
    for _ in range(calls):
        torch.nn.functional.linear(x, w, b)
    return 1e6 * (time.perf_counter() - start) / calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", type=Path)
    p.add_argument("sources", type=Path)
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    print(f"GEMMs alone (F.linear, {args.threads} thread(s), us): rows x in -> out: row-major / column-major")
    for rows, k, n in GEMMS:
        before, after = gemm_us(rows, k, n, False), gemm_us(rows, k, n, True)
        print(f"  {rows} x {k} -> {n}: {before:.1f} / {after:.1f} ({before / after:.2f}x)")

    translator = heed.load(str(args.model), device="cpu")
    texts = args.sources.read_text(encoding="utf-8").splitlines()[: args.sentences]
    print(f"\n{args.model}: {len(texts)} sentences, best of {args.rounds} rounds, sentences/s")
    print("| beam | batch | row-major (before) | column-major (after) | speed-up | same outputs |")
    print("|---:|---:|---:|---:|---:|---|")
    for beam, batch in SETTINGS:
        best = {False: float("inf"), True: float("inf")}
        outputs = {}
        set_layout(translator, False)
        decode_seconds(translator, texts[:10], beam, batch)  # warm-up
        for _ in range(args.rounds):
            for columns in (False, True):
                set_layout(translator, columns)
                seconds, outputs[columns] = decode_seconds(translator, texts, beam, batch)
                best[columns] = min(best[columns], seconds)
        before, after = len(texts) / best[False], len(texts) / best[True]
        print(f"| {beam} | {batch} | {before:.1f} | {after:.1f} | {after / before:.2f}x | "
              f"{'yes' if outputs[False] == outputs[True] else 'NO'} |")


if __name__ == "__main__":
    main()
