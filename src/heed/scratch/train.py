"""Train the NumPy attention seq2seq on the dates task, on the CPU, without torch doing any work.

    python -m heed.scratch --epochs 10 --batch-size 128 --hidden 256 --embed 16 --train-size 45000

Characters are the tokens (heed.data.vocab.Vocab: pad=0, bos=1, eos=2, unk=3). Examples follow
heed.data.batching's layout: src = chars + EOS, tgt_in = BOS + chars, tgt_out = chars + EOS,
all right-padded with 0, so a scratch model and its torch twin (heed.scratch.bridge) read the
same batches. Batches hold `batch_size` sentences of similar source length (sorted within pools
of 50 batches, then the batch order shuffled), so little time goes to padding.

Each epoch reports the training seconds (evaluation excluded), the mean loss over the epoch, and
exact match (the whole ISO date right) of greedy decoding on the held-out dev set; within an epoch,
a line every 5 s (heed.plumbing.heartbeat.PROGRESS_LINE_SECONDS) says the batches done and the loss.
"""
from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from heed.scratch.model import SCORES, AttentionSeq2seq
from heed.scratch.optim import Adam, clip_grads

if TYPE_CHECKING:
    from heed.data.corpus import Pair
    from heed.data.vocab import Vocab

PAD, BOS, EOS = 0, 1, 2


class Batch(NamedTuple):
    """src (batch, src_len), src_lengths (batch,), tgt_in and tgt_out (batch, tgt_len); int64, pad 0."""

    src: np.ndarray
    src_lengths: np.ndarray
    tgt_in: np.ndarray
    tgt_out: np.ndarray


class Encoded(NamedTuple):
    """A data set as padded id arrays, rows in the caller's order."""

    src: np.ndarray  # (n, max_src_len + 1): chars + EOS
    src_lengths: np.ndarray  # (n,)
    tgt_in: np.ndarray  # (n, max_tgt_len + 1): BOS + chars
    tgt_out: np.ndarray  # (n, max_tgt_len + 1): chars + EOS
    tgt_lengths: np.ndarray  # (n,)

    def batch(self, rows: np.ndarray) -> Batch:
        """The rows, cropped to their own longest source and target."""
        s, t = int(self.src_lengths[rows].max()), int(self.tgt_lengths[rows].max())
        return Batch(self.src[rows, :s], self.src_lengths[rows], self.tgt_in[rows, :t], self.tgt_out[rows, :t])


class EpochReport(NamedTuple):
    epoch: int
    seconds: float  # training only
    loss: float  # mean of the batch losses
    exact_match: float  # on the held-out set, in [0, 1]
    eval_seconds: float


class Trained(NamedTuple):
    model: AttentionSeq2seq
    src_vocab: Vocab
    tgt_vocab: Vocab
    history: list[EpochReport]


def char_vocab(texts: Sequence[str]) -> Vocab:
    from heed.data.vocab import Vocab

    return Vocab.build(list(t) for t in texts)


def _padded(rows: Sequence[list[int]], width: int) -> np.ndarray:
    out = np.zeros((len(rows), width), np.int64)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


def encode(pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab) -> Encoded:
    srcs = [src_vocab.encode(list(p.src), add_eos=True) for p in pairs]
    tgts = [tgt_vocab.encode(list(p.tgt)) for p in pairs]
    width = max(map(len, tgts)) + 1
    return Encoded(
        src=_padded(srcs, max(map(len, srcs))),
        src_lengths=np.array([len(s) for s in srcs], np.int64),
        tgt_in=_padded([[BOS, *t] for t in tgts], width),
        tgt_out=_padded([[*t, EOS] for t in tgts], width),
        tgt_lengths=np.array([len(t) + 1 for t in tgts], np.int64),
    )


def batch_rows(src_lengths: np.ndarray, batch_size: int, rng: np.random.Generator | None,
               pool_batches: int = 50) -> list[np.ndarray]:
    """Row indices per batch. With rng: shuffle, sort by source length within pools of
    `pool_batches` batches, cut, shuffle the batch order. Without: sorted by length (evaluation)."""
    n = len(src_lengths)
    if rng is None:
        order = np.argsort(src_lengths, kind="stable")
        return [order[i:i + batch_size] for i in range(0, n, batch_size)]
    order = rng.permutation(n)
    pool = batch_size * pool_batches
    batches = []
    for start in range(0, n, pool):
        chunk = order[start:start + pool]
        chunk = chunk[np.argsort(src_lengths[chunk], kind="stable")]
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def decode(ids: np.ndarray, vocab: Vocab) -> str:
    return "".join(vocab.decode(ids))


def exact_match(model: AttentionSeq2seq, data: Encoded, tgt_vocab: Vocab, *, batch_size: int = 500,
                max_len: int | None = None) -> float:
    """Fraction of rows whose greedy output equals the reference exactly (EOS included)."""
    max_len = data.tgt_out.shape[1] + 5 if max_len is None else max_len
    right = 0
    for rows in batch_rows(data.src_lengths, batch_size, None):
        b = data.batch(rows)
        tokens = model.generate(b.src, b.src_lengths, max_len=max_len).tokens  # (batch, steps)
        width = max(tokens.shape[1], b.tgt_out.shape[1])
        got = np.zeros((len(rows), width), np.int64)
        want = np.zeros((len(rows), width), np.int64)
        got[:, :tokens.shape[1]], want[:, :b.tgt_out.shape[1]] = tokens, b.tgt_out
        right += int((got == want).all(axis=1).sum())
    return right / len(data.src_lengths)


def train(train_pairs: Sequence[Pair], eval_pairs: Sequence[Pair], *, epochs: int, batch_size: int = 128,
          hidden: int = 256, embed: int = 16, score: str = "dot", lr: float = 1e-3, max_grad: float = 5.0,
          seed: int = 0, dtype: type = np.float32, stop_at: float | None = None,
          log: Callable[[str], None] = print, every: float | None = None) -> Trained:
    """Train with Adam and global-norm clipping; evaluate exact match after every epoch.
    `stop_at`: stop once held-out exact match reaches it. `every`: seconds between the progress
    lines within an epoch (default heed.plumbing.heartbeat.line_seconds(): 5)."""
    from heed.plumbing.heartbeat import line_seconds

    every = line_seconds() if every is None else every
    src_vocab = char_vocab([p.src for p in train_pairs])
    tgt_vocab = char_vocab([p.tgt for p in train_pairs])
    data, held_out = encode(train_pairs, src_vocab, tgt_vocab), encode(eval_pairs, src_vocab, tgt_vocab)
    rng = np.random.default_rng(seed)
    model = AttentionSeq2seq(len(src_vocab), len(tgt_vocab), embed_size=embed, hidden_size=hidden, score=score,
                             dtype=dtype, rng=rng)
    optimizer = Adam(lr=lr)
    log(f"scratch: {len(train_pairs)} train / {len(eval_pairs)} held-out pairs, vocab {len(src_vocab)} -> "
        f"{len(tgt_vocab)}, embed {embed}, hidden {hidden}, score {score}, batch {batch_size}, {np.dtype(dtype)}")
    history: list[EpochReport] = []
    for epoch in range(1, epochs + 1):
        start = said = time.perf_counter()
        losses = []
        batches = batch_rows(data.src_lengths, batch_size, rng)
        for done, rows in enumerate(batches, start=1):
            b = data.batch(rows)
            losses.append(model.forward(b.src, b.src_lengths, b.tgt_in, b.tgt_out))
            model.backward()
            clip_grads(model.grads, max_grad)
            optimizer.update(model.params, model.grads)
            if time.perf_counter() - said >= every and done < len(batches):
                said = time.perf_counter()
                log(f"epoch {epoch:3d}  batch {done}/{len(batches)}  loss {np.mean(losses):.4f}  "
                    f"({said - start:.0f} s)")
        seconds = time.perf_counter() - start
        start = time.perf_counter()
        em = exact_match(model, held_out, tgt_vocab)
        report = EpochReport(epoch, seconds, float(np.mean(losses)), em, time.perf_counter() - start)
        history.append(report)
        log(f"epoch {epoch:3d}  {report.seconds:7.1f} s  loss {report.loss:.4f}  "
            f"held-out exact match {100 * em:6.2f}%  (eval {report.eval_seconds:.1f} s)")
        if stop_at is not None and em >= stop_at:
            break
    return Trained(model, src_vocab, tgt_vocab, history)


def load_dates(*, train_size: int, eval_size: int, seed: int, languages: Sequence[str],
               verbose_forms: bool):
    """heed.data.dates splits: (train, dev, test)."""
    from heed.data.dates import generate_dates

    return generate_dates(n_train=train_size, n_dev=eval_size, n_test=eval_size, seed=seed,
                          languages=tuple(languages), verbose_forms=verbose_forms)


def _integer(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `low` (argparse reports the message, exit code 2)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


def _real(*, positive: bool = False, at_most: float | None = None) -> Callable[[str], float]:
    """An argparse type: a finite number, > 0 with `positive` (else >= 0), <= `at_most` if given."""
    bounds = ("> 0" if positive else ">= 0") + (f" and <= {at_most}" if at_most is not None else "")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number {bounds}, got {text!r}") from None
        too_big = at_most is not None and value > at_most
        if not math.isfinite(value) or value < 0 or (positive and value == 0) or too_big:
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {text}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m heed.scratch",
                                description="Train the NumPy attention seq2seq on the dates task (CPU only).")
    p.add_argument("--epochs", type=_integer(1), default=10)
    p.add_argument("--batch-size", type=_integer(1), default=128)
    p.add_argument("--hidden", type=_integer(1), default=256)
    p.add_argument("--embed", type=_integer(1), default=16)
    p.add_argument("--score", choices=SCORES, default="dot")
    p.add_argument("--lr", type=_real(positive=True), default=1e-3)
    p.add_argument("--max-grad", type=_real(positive=True), default=5.0, help="global gradient-norm clip")
    p.add_argument("--train-size", type=_integer(1), default=45000)
    p.add_argument("--eval-size", type=_integer(1), default=5000, help="dev (per epoch) and test (at the end) pairs")
    p.add_argument("--languages", default="en,fr,de,es,ko", help="comma-separated subset of en,fr,de,es,ko")
    p.add_argument("--verbose-forms", action="store_true", help="add long English phrasings (up to ~100 chars)")
    p.add_argument("--seed", type=_integer(0), default=0)  # NumPy generators take no negative seed
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--stop-at", type=_real(at_most=1.0), default=None,
                   help="stop once dev exact match reaches this (0-1)")
    return p


def main(argv: Sequence[str] | None = None) -> Trained:
    """The command line; a bad option or an impossible data request exits with code 2 and one line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        splits = load_dates(train_size=args.train_size, eval_size=args.eval_size, seed=args.seed,
                            languages=[s.strip() for s in args.languages.split(",") if s.strip()],
                            verbose_forms=args.verbose_forms)
    except ValueError as e:  # unknown languages, more distinct dates than the task has
        parser.error(str(e))
    try:
        trained = train(splits.train, splits.dev, epochs=args.epochs, batch_size=args.batch_size,
                        hidden=args.hidden, embed=args.embed, score=args.score, lr=args.lr, max_grad=args.max_grad,
                        seed=args.seed, dtype=np.dtype(args.dtype).type, stop_at=args.stop_at,
                        log=lambda line: print(line, flush=True))  # a log file gets each line as it comes
    except MemoryError:
        parser.exit(2, f"{parser.prog}: error: out of memory for --hidden {args.hidden}, --embed {args.embed}, "
                       f"--batch-size {args.batch_size}; lower them\n")
    test = encode(splits.test, trained.src_vocab, trained.tgt_vocab)
    em = exact_match(trained.model, test, trained.tgt_vocab)
    print(f"test exact match {100 * em:.2f}% on {len(splits.test)} pairs")
    return trained
