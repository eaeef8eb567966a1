"""Is the fused SDPA path worth keeping? Times `Attention.forward(...).context` (explicit:
scores, masked_softmax, weights @ values) against `Attention.context` (torch's fused
scaled_dot_product_attention) for the all-steps call the teacher-forced Luong pass makes.

    OMP_NUM_THREADS=1 .venv/bin/python bench/attention_fused.py
    .venv/bin/python bench/attention_fused.py --batch 32 --scores dot general cosine

Both paths include `project_keys` and a backward pass of a fixed upstream gradient; the source
batch has realistic padding (lengths drawn from [src_len/2, src_len]). Prints ms per call, the
median and (min) of --repeats timed calls after --warmup untimed ones; the four variants take
turns call by call, so load from other processes falls on all of them alike.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from heed.nn.masks import lengths_to_mask
from heed.nn.rnn.attention import FUSABLE_SCORES, Attention


def time_interleaved(fns: dict[str, Callable[[], None]], *, warmup: int, repeats: int) -> dict[str, list[float]]:
    """Seconds per call of each fn. The fns take turns, so a burst of load on a shared machine
    slows them all alike instead of whichever happened to be running."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def bench_score(score: str, args: argparse.Namespace, generator: torch.Generator) -> dict[str, tuple[float, float]]:
    """(median, min) ms per call of each path."""
    attention = Attention(score, query_size=args.hidden, key_size=args.hidden)
    states = torch.randn(args.batch, args.src_len, args.hidden, generator=generator)  # (batch, src_len, hidden)
    query = torch.randn(args.batch, args.tgt_len, args.hidden, generator=generator)  # (batch, tgt_len, hidden)
    lengths = torch.randint(args.src_len // 2, args.src_len + 1, (args.batch,), generator=generator)
    mask = lengths_to_mask(lengths, args.src_len)  # (batch, src_len), True = real token
    upstream = torch.randn(args.batch, args.tgt_len, args.hidden, generator=generator)  # d loss / d context
    states.requires_grad_()
    query.requires_grad_()

    def explicit() -> torch.Tensor:
        return attention(query, attention.project_keys(states), states, mask).context

    def fused() -> torch.Tensor:
        return attention.context(query, attention.project_keys(states), states, mask, fused=True)

    with torch.no_grad():  # the two paths must agree before their speed means anything
        torch.testing.assert_close(fused(), explicit(), rtol=1e-4, atol=1e-5)

    def train_step(path: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            path().backward(upstream)
            query.grad = states.grad = None
            attention.zero_grad(set_to_none=True)
        return run

    def inference(path: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            with torch.no_grad():
                path()
        return run

    times = time_interleaved({
        "explicit fwd+bwd": train_step(explicit),
        "fused fwd+bwd": train_step(fused),
        "explicit fwd": inference(explicit),
        "fused fwd": inference(fused),
    }, warmup=args.warmup, repeats=args.repeats)
    return {name: (1000 * statistics.median(t), 1000 * min(t)) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--src-len", type=int, default=30)
    parser.add_argument("--tgt-len", type=int, default=30)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--scores", nargs="+", default=["dot", "general"], choices=FUSABLE_SCORES)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    generator = torch.Generator().manual_seed(args.seed)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); batch {args.batch}, "
          f"src_len {args.src_len}, tgt_len {args.tgt_len}, hidden {args.hidden}; "
          f"ms per call, median (min) of {args.repeats} interleaved calls")
    columns = ["explicit fwd+bwd", "fused fwd+bwd", "explicit fwd", "fused fwd"]
    print(f"{'score':<8}" + "".join(f"{c:>20}" for c in columns) + f"{'fused speed-up fwd+bwd / fwd':>31}")
    for score in args.scores:
        ms = bench_score(score, args, generator)
        cells = "".join(f"{f'{ms[c][0]:.3f} ({ms[c][1]:.3f})':>20}" for c in columns)
        train = ms["explicit fwd+bwd"][0] / ms["fused fwd+bwd"][0]
        infer = ms["explicit fwd"][0] / ms["fused fwd"][0]
        print(f"{score:<8}{cells}{f'{train:.2f}x / {infer:.2f}x':>31}")

if __name__ == "__main__":
    main()
