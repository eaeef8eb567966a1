"""Does coverage cure looping? Tiny models trained briefly on a task whose outputs never repeat a
token, decoded greedily; the repeated-token rate (heed.evaluate.repeated_token_rate) of their outputs
with and without coverage attention (Tu et al. 2016; See et al. 2017).

    OMP_NUM_THREADS=1 .venv/bin/python bench/studies/coverage_repetition.py [--steps 150] [--seeds 3]
        [--symbols 21 --min-len 6 --max-len 14]

The task: copy a sequence of 6-14 (--min-len, --max-len) distinct symbols (of --symbols 21). The references repeat nothing, so every
repeated token in an output is an error, and a model that loses its place in the source tends to
attend to the same symbol again and emit it again. An undertrained model does (the `--steps` budget
is kept small on purpose). Each seed trains three Bahdanau models (additive score, biLSTM 2x32,
LSTM decoder 64, Adam 3e-3, batch 32, no dropout) from the same initial weights where they share
them and on the same batches: without coverage, with coverage (lambda 0), and with coverage and the
coverage loss (lambda 1, See et al. 2017, eq. 13); then decodes 500 held-out sources greedily
(at most 2 x source + 10 tokens) and reports the repeated-token rate (n = 1, percent of output
tokens), the output/reference length ratio and exact match.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time
from types import SimpleNamespace

import torch

from heed.evaluate import repeated_token_rate
from heed.nn.build import ModelConfig, build_model
from heed.search import DecodeConfig, greedy_search

PAD, BOS, EOS = 0, 1, 2
VARIANTS = {
    "no coverage": {},
    "coverage": dict(coverage=True),
    "coverage + loss 1.0": dict(coverage=True, coverage_loss=1.0),
}


def sample(rng: random.Random, n: int, task: SimpleNamespace) -> list[list[int]]:
    """n sequences of task.min_len..task.max_len distinct symbols (ids 3 ..)."""
    symbols = list(range(3, 3 + task.symbols))
    return [rng.sample(symbols, rng.randint(task.min_len, task.max_len)) for _ in range(n)]


def batch_of(seqs: list[list[int]]) -> SimpleNamespace:
    """src = seq + EOS; tgt_in = BOS + seq; tgt_out = seq + EOS; right-padded with PAD."""
    lengths = torch.tensor([len(s) + 1 for s in seqs])
    width = int(lengths.max())
    src = torch.full((len(seqs), width), PAD)
    tgt_in, tgt_out = src.clone(), src.clone()
    for b, s in enumerate(seqs):
        src[b, : len(s) + 1] = torch.tensor(s + [EOS])
        tgt_in[b, : len(s) + 1] = torch.tensor([BOS] + s)
        tgt_out[b, : len(s) + 1] = torch.tensor(s + [EOS])
    return SimpleNamespace(src=src, src_lengths=lengths, tgt_in=tgt_in, tgt_out=tgt_out)


def train_and_decode(variant: dict, seed: int, steps: int, test: list[list[int]],
                     task: SimpleNamespace) -> dict[str, float]:
    torch.manual_seed(seed)
    cfg = ModelConfig(decoder="bahdanau", embed_size=32, hidden_size=64, dropout=0.0, **variant)
    model = build_model(cfg, src_vocab_size=3 + task.symbols, tgt_vocab_size=3 + task.symbols)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    rng = random.Random(seed)  # the same batches for every variant of a seed
    model.train()
    started = time.perf_counter()
    for _ in range(steps):
        batch = batch_of(sample(rng, 32, task))
        loss = model.loss(batch)
        optimizer.zero_grad()
        (loss.total / int((batch.tgt_out != PAD).sum())).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    seconds = time.perf_counter() - started
    model.eval()
    test_batch = batch_of(test)
    with torch.inference_mode():
        found = greedy_search(model, test_batch.src, test_batch.src_lengths,
                              DecodeConfig(min_len=0, max_len_a=2.0, max_len_b=10))
    outputs = [h.tokens for h in found]
    return {"repeat": 100 * repeated_token_rate(outputs),
            "length": sum(map(len, outputs)) / sum(map(len, test)),
            "exact": 100 * statistics.mean(o == t for o, t in zip(outputs, test)),
            "seconds": seconds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--symbols", type=int, default=21)
    p.add_argument("--min-len", type=int, default=6)
    p.add_argument("--max-len", type=int, default=14)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    if not 1 <= args.min_len <= args.max_len <= args.symbols:
        p.error("need 1 <= --min-len <= --max-len <= --symbols (the symbols of a sequence are distinct)")
    torch.set_num_threads(args.threads)
    task = SimpleNamespace(symbols=args.symbols, min_len=args.min_len, max_len=args.max_len)
    test = sample(random.Random(12345), 500, task)
    assert repeated_token_rate(test) == 0.0  # the references never repeat a token
    print(f"copy {args.min_len}-{args.max_len} distinct symbols of {args.symbols}; {args.steps} steps of 32; "
          f"greedy on 500 held-out; {args.threads} thread(s)")
    print(f"{'seed':>4}  {'variant':<20} {'repeated %':>10} {'len ratio':>9} {'exact %':>8} {'train s':>8}")
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    for seed in range(args.seeds):
        for name, variant in VARIANTS.items():
            r = train_and_decode(variant, seed, args.steps, test, task)
            rows[name].append(r)
            print(f"{seed:>4}  {name:<20} {r['repeat']:>10.2f} {r['length']:>9.3f} {r['exact']:>8.1f} "
                  f"{r['seconds']:>8.1f}", flush=True)
    print("mean")
    for name, runs in rows.items():
        print(f"{'':>4}  {name:<20} {statistics.mean(r['repeat'] for r in runs):>10.2f} "
              f"{statistics.mean(r['length'] for r in runs):>9.3f} {statistics.mean(r['exact'] for r in runs):>8.1f}")


if __name__ == "__main__":
    main()
