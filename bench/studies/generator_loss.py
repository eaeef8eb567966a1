"""Before/after for heed.nn.loss.generator_loss: the generator and the loss as
`F.cross_entropy(generator(features))` (before) against the chunked pass (after), alone and
inside a whole training step of the bench/compare models (there "after" is `Seq2Seq.loss`, as the
trainer calls it), in float32 and under bf16 autocast.

    OMP_NUM_THREADS=1 .venv/bin/python bench/studies/generator_loss.py [--data DIR] [--embed 256 --hidden 256]
        [--steps 20] [--label-smoothing 0.0]

The batches are bench/floor.py's (lengths and vocabularies from DIR/train.* when given: the
Multi30k or dates data of bench/compare). A step is forward + loss + backward + clip + Adam;
means over `--steps` steps after 5 warm-up steps, the variants interleaved batch by batch.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: floor.py, the suite's
import floor

from heed.nn.loss import generator_loss

PAD = 0


def loss_of(model, batch, *, fused: bool, eps: float):
    if fused:  # the model's own loss, as the trainer calls it (generator_loss inside)
        return model.loss(SimpleNamespace(**batch), label_smoothing=eps).total
    logits = model(batch["src"], batch["src_lengths"], batch["tgt_in"], need_attention=False).logits
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), batch["tgt_out"].reshape(-1),
                           ignore_index=PAD, label_smoothing=eps, reduction="sum")


def step(model, optimizer, batch, *, fused: bool, bf16: bool, eps: float) -> None:
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = loss_of(model, batch, fused=fused, eps=eps)
    (loss / batch["tokens"]).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()


def alone(features, generator, target, *, fused: bool, bf16: bool, eps: float) -> None:
    generator.zero_grad(set_to_none=True)
    features.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        if fused:
            loss = generator_loss(features, generator, target, ignore_index=PAD, label_smoothing=eps)
        else:
            logits = generator(features).float()
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=PAD,
                                   label_smoothing=eps, reduction="sum")
    loss.backward()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, help="folder with train.src/train.tgt (lengths, vocabularies)")
    p.add_argument("--embed", type=int, default=floor.EMBED)
    p.add_argument("--hidden", type=int, default=floor.HIDDEN)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--label-smoothing", type=float, default=0.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    eps = args.label_smoothing

    src_lens, tgt_lens, src_vocab, tgt_vocab, source = floor.corpus_lengths(args.data, args.seed)
    batches = floor.make_batches(src_lens, tgt_lens, src_vocab=src_vocab, tgt_vocab=tgt_vocab, n_batches=20,
                                 seed=args.seed)
    tokens = statistics.mean(b["tokens"] for b in batches)
    rows = statistics.mean(b["tgt_out"].numel() for b in batches)
    print(f"{source}: target vocabulary {tgt_vocab}, {tokens:.0f} target tokens in {rows:.0f} rows a batch; "
          f"embed {args.embed}, hidden {args.hidden}, label smoothing {eps}, {args.threads} thread(s)")
    variants = [(False, False), (True, False), (False, True), (True, True)]  # (fused, bf16)

    generator = torch.nn.Linear(args.hidden, tgt_vocab)
    features = torch.randn(len(batches[0]["tgt_out"]), batches[0]["tgt_out"].size(1), args.hidden,
                           requires_grad=True)
    target = batches[0]["tgt_out"]
    times = {v: [] for v in variants}
    for k in range(5 + args.steps):
        for fused, bf16 in variants:
            start = time.perf_counter()
            alone(features, generator, target, fused=fused, bf16=bf16, eps=eps)
            if k >= 5:
                times[(fused, bf16)].append(time.perf_counter() - start)
    print(f"\ngenerator + loss alone, forward + backward ({target.numel()} rows, {int((target != PAD).sum())} tokens):")
    report(times, tokens=None)

    model = floor.HeedModel(src_vocab, tgt_vocab, args.embed, args.hidden).model
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    times = {v: [] for v in variants}
    for k in range(5 + args.steps):
        batch = batches[k % len(batches)]
        for fused, bf16 in variants:
            start = time.perf_counter()
            step(model, optimizer, batch, fused=fused, bf16=bf16, eps=eps)
            if k >= 5:
                times[(fused, bf16)].append(time.perf_counter() - start)
    print("\na whole training step (forward, loss, backward, clip, Adam):")
    report(times, tokens=tokens)


def report(times: dict, *, tokens: float | None) -> None:
    for bf16 in (False, True):
        before, after = (1e3 * statistics.mean(times[(fused, bf16)]) for fused in (False, True))
        rate = "" if tokens is None else f"  ({tokens / before * 1e3:,.0f} -> {tokens / after * 1e3:,.0f} target tok/s)"
        print(f"  {'bf16 autocast' if bf16 else 'float32':<14} F.cross_entropy(generator(f)) {before:7.1f} ms, "
              f"generator_loss {after:7.1f} ms: {before / after:.2f}x{rate}")


if __name__ == "__main__":
    main()
