"""Before/after for the training step of an input-feeding Luong model: autograd through the step
loop against the hand-written pass (heed.nn.rnn.feeding), each in float32 and under bf16 autocast,
plus Adam's step with and without `fused=True`, and the recurrent GEMM alone in float32 and bf16.

    OMP_NUM_THREADS=1 .venv/bin/python bench/feeding_pass.py [--data DIR] [--steps 40] [--threads 1]

The model and batches are bench/floor.py's (the dates model of bench/compare: embed 64,
biLSTM 64+64, LSTM decoder 128, general attention, batch 128; lengths from DIR/train.* when
given). A step is forward + loss + backward + clip + Adam; means over `--steps` steps after 10
warm-up steps (a trainer's tokens/s is a mean too, and source lengths vary from batch to batch),
the four variants interleaved batch by batch so that load on a shared machine falls on all alike.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import floor


def step(model, optimizer, batch, *, fused: bool, bf16: bool) -> None:
    """The model's own loss (as the trainer calls it), its teacher-forced pass the fused one or,
    with `fused` False, autograd through the step loop."""
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16), \
            mock.patch.object(type(model.decoder), "fusable", lambda self, tgt_in: fused):
        loss = model.loss(SimpleNamespace(**batch)).total / batch["tokens"]
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()


def adam_ms(model, *, fused: bool, steps: int) -> float:
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=fused)
    times = []
    for k in range(10 + steps):
        start = time.perf_counter()
        optimizer.step()
        if k >= 10:
            times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def gemm_us(m: int, k: int, n: int, dtype: torch.dtype, calls: int = 300) -> float:
    """Mean microseconds of one (m, k) @ (k, n) product."""
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    for _ in range(30):
        a @ b
    start = time.perf_counter()
    for _ in range(calls):
        a @ b
    return 1e6 * (time.perf_counter() - start) / calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, help="folder with train.src/train.tgt (lengths, vocab)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    src_lens, tgt_lens, src_vocab, tgt_vocab, _ = floor.corpus_lengths(args.data, 0)
    batches = floor.make_batches(src_lens, tgt_lens, src_vocab=src_vocab, tgt_vocab=tgt_vocab, n_batches=20, seed=42)
    tokens = statistics.mean(b["tokens"] for b in batches)

    variants = {(fused, bf16): [] for fused in (False, True) for bf16 in (False, True)}
    runs = {key: floor.HeedModel(src_vocab, tgt_vocab).model for key in variants}
    optimizers = {key: torch.optim.Adam(m.parameters(), lr=1e-3, fused=True) for key, m in runs.items()}
    for k in range(10 + args.steps):
        for (fused, bf16), times in variants.items():
            start = time.perf_counter()
            step(runs[fused, bf16], optimizers[fused, bf16], batches[k % len(batches)], fused=fused, bf16=bf16)
            if k >= 10:
                times.append(time.perf_counter() - start)

    print(f"{torch.get_num_threads()} thread(s), batch {floor.BATCH}, {tokens:.0f} target tokens per step; "
          f"means of {args.steps} steps")
    base = statistics.mean(variants[False, False])
    for (fused, bf16), times in variants.items():
        ms = 1e3 * statistics.mean(times)
        print(f"  {'hand-written pass' if fused else 'autograd step loop':<20} {'bf16 autocast' if bf16 else 'float32':<14}"
              f"{ms:7.1f} ms  {tokens / ms * 1e3:8,.0f} tok/s  {base * 1e3 / ms:5.2f}x")
    for shape in ((128, 256, 512), (320, 256, 512)):  # the recurrent product: training batch, beam 5 x 64
        fp32, bf16 = gemm_us(*shape, torch.float32), gemm_us(*shape, torch.bfloat16)
        print(f"  GEMM {shape[0]}x{shape[1]} @ {shape[1]}x{shape[2]}: {fp32:.0f} us float32, {bf16:.0f} us bf16 "
              f"({fp32 / bf16:.1f}x)")
    model = floor.HeedModel(src_vocab, tgt_vocab).model
    print(f"  Adam step alone: {adam_ms(model, fused=False, steps=args.steps):.2f} ms (foreach), "
          f"{adam_ms(model, fused=True, steps=args.steps):.2f} ms (fused=True)")


if __name__ == "__main__":
    main()
