"""Before and after for heed's fast paths, each on the same batches and the same weights.

    OMP_NUM_THREADS=1 .venv/bin/python bench/studies/fast_paths.py [--data DIR] [--embed 64 --hidden 128]
        [--batches 20] [--threads 1]

Lengths and vocabulary sizes come from DIR/train.src and DIR/train.tgt (space-separated tokens, as
bench/compare writes them), else from the built-in dates length mix; token ids are random (speed does
not depend on them). The model is Luong general attention (bidirectional LSTM encoder of hidden / 2
per direction, LSTM decoder of hidden), batches of 128 sentences. Rows (mean over --batches batches,
after warm-up; "ms" per batch, "tok/s" real target tokens per second):

1. token-bucketed batches (heed.data.batching.token_batches: sorted in pools, so a batch holds
   similar lengths) against shuffled batches of the same 128 sentences each: padding and a whole
   training step (forward, backward, Adam), with input feeding.
2. the encoder run once per distinct source length over just those rows (heed's RNNEncoder on the
   CPU, where a batch holds few lengths) against one call over the packed batch: forward and
   backward of the encoder alone, on bucketed and on shuffled batches.
3. Luong without input feeding: the whole target in one RNN call and one batched attention call
   (LuongDecoder.forward) against the step loop (one decoder step at a time): forward + backward.
4. the attention's key projection computed once per source (EncoderOutput.keys) against once per
   step, in greedy search of 64 sentences.
5. beam search vectorised over batch x beam against one sentence at a time: beam 5, 64 sentences.
6. beam 5's candidates per step from each beam's own 10 best tokens, found in two levels
   (heed.search.beam._row_topk), against one top-k over all beam x vocab extensions: the whole beam
   search of 64 sentences (30 steps, as min_len forces) with a target vocabulary of 8,000 and of
   32,000 (the corpus's own sizes for the rest of the model).
7. with --groups: where the by-length encoder stops paying (RNNEncoder._max_length_groups): a
   bidirectional LSTM and GRU of embed and hidden / 2 per direction, 128 sentences of 30 tokens and
   less spread over k distinct lengths, packed against by length, training (forward + backward) and
   decoding (forward under inference_mode).
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import torch
import torch.nn.functional as F

import heed.search
from heed.data.batching import Batch, collate, token_batches
from heed.data.vocab import PAD
from heed.nn.build import ModelConfig, build_model
from heed.nn.rnn.decoder import RNNDecoder
from heed.search import DecodeConfig, search

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: floor.py, the suite's
from floor import corpus_lengths

BATCH = 128


def examples_from_lengths(src_lens: list[int], tgt_lens: list[int], *, src_vocab: int, tgt_vocab: int,
                          n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """n (src_ids, tgt_ids) pairs with the real lengths of n random corpus lines and random ids."""
    rng = random.Random(seed)
    picks = rng.sample(range(len(src_lens)), n)
    return [([rng.randrange(4, src_vocab) for _ in range(max(src_lens[i], 1))],
             [rng.randrange(4, tgt_vocab) for _ in range(max(tgt_lens[i], 1))]) for i in picks]


def shuffled_batches(examples: list, seed: int) -> list[Batch]:
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    groups = [order[k:k + BATCH] for k in range(0, len(order) - BATCH + 1, BATCH)]
    return [collate([examples[i] for i in g], g) for g in groups]


def bucketed_batches(examples: list, seed: int) -> list[Batch]:
    batches = token_batches(examples, batch_tokens=10**9, max_sentences=BATCH, shuffle=True, seed=seed)
    return [b for b in batches if b.src.size(0) == BATCH]  # whole batches only, like the shuffled ones


def mean_seconds(run: Callable[[Batch], None], batches: list[Batch], warmup: int = 3) -> float:
    for b in batches[:warmup]:
        run(b)
    times = []
    for b in batches:
        start = time.perf_counter()
        run(b)
        times.append(time.perf_counter() - start)
    return statistics.mean(times)


def training_step(model: torch.nn.Module) -> Callable[[Batch], None]:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)

    def run(b: Batch) -> None:
        optimizer.zero_grad(set_to_none=True)
        logits = model(b.src, b.src_lengths, b.tgt_in, need_attention=False).logits
        loss = F.cross_entropy(logits.flatten(0, 1), b.tgt_out.flatten(), ignore_index=PAD, reduction="sum")
        (loss / (b.tgt_out != PAD).sum()).backward()
        optimizer.step()

    return run


def padding(batches: list[Batch]) -> str:
    real = sum(int(b.src_lengths.sum() + (b.tgt_out != PAD).sum()) for b in batches)
    padded = sum(b.src.numel() + b.tgt_out.numel() for b in batches)
    return f"{padded / real - 1:.0%} padding"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, help="folder with train.src/train.tgt; else the built-in dates mix")
    p.add_argument("--embed", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--groups", action="store_true", help="also the encoder by number of distinct lengths")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    src_lens, tgt_lens, src_vocab, tgt_vocab, source = corpus_lengths(args.data, args.seed)
    examples = examples_from_lengths(src_lens, tgt_lens, src_vocab=src_vocab, tgt_vocab=tgt_vocab,
                                     n=BATCH * args.batches, seed=args.seed)
    shuffled, bucketed = shuffled_batches(examples, args.seed), bucketed_batches(examples, args.seed)

    def build(input_feeding: bool) -> torch.nn.Module:
        torch.manual_seed(args.seed)
        cfg = ModelConfig(decoder="luong", attention="general", input_feeding=input_feeding, embed_size=args.embed,
                          hidden_size=args.hidden, dropout=0.0)
        return build_model(cfg, src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab)

    print(f"fast paths on {torch.get_num_threads()} thread(s): embed {args.embed}, hidden {args.hidden}, "
          f"vocab {src_vocab}/{tgt_vocab}, lengths from {source}, batches of {BATCH}, "
          f"{len(shuffled)} shuffled / {len(bucketed)} bucketed batches")
    print()
    print("| fast path | before | after | speed-up |")
    print("|---|---:|---:|---:|")

    def row(name: str, before: float, after: float, unit: str = "ms", note_before: str = "",
            note_after: str = "") -> None:
        nb, na = f" ({note_before})" if note_before else "", f" ({note_after})" if note_after else ""
        print(f"| {name} | {before * 1e3:,.1f} {unit}{nb} | {after * 1e3:,.1f} {unit}{na} | "
              f"{before / after:.2f}× |", flush=True)

    # 1. bucketing: per real target token, as batches differ in what they hold
    model = build(input_feeding=True)
    step = training_step(model)

    def per_token(batches: list[Batch]) -> float:
        tokens = statistics.mean(int((b.tgt_out != PAD).sum()) for b in batches)
        return mean_seconds(step, batches) / tokens * 1000  # seconds per 1,000 target tokens

    row("token-bucketed batches: training step per 1,000 target tokens", per_token(shuffled), per_token(bucketed),
        note_before=f"shuffled, {padding(shuffled)}", note_after=f"bucketed, {padding(bucketed)}")

    # 2. the encoder: one call per distinct length (heed on the CPU) against one packed call
    encoder = model.encoder

    def encode_packed(b: Batch) -> None:
        states, final = encoder._run_packed(encoder.embedding(b.src), b.src_lengths)
        (states.sum() + sum(t.sum() for t in final)).backward()

    def encode_heed(b: Batch) -> None:
        enc = encoder(b.src, b.src_lengths)
        (enc.states.sum() + sum(t.sum() for t in enc.final)).backward()

    for name, batches in (("bucketed", bucketed), ("shuffled", shuffled)):
        groups = [len(set(b.src_lengths.tolist())) for b in batches]
        by_length = sum(g <= encoder._max_length_groups() for g in groups)
        row(f"encoder forward + backward, {name} batches ({statistics.mean(groups):.1f} source lengths a batch)",
            mean_seconds(encode_packed, batches), mean_seconds(encode_heed, batches), note_before="packed",
            note_after=f"heed: by length in {by_length} of {len(batches)} batches")

    # 3. all steps at once (no input feeding)
    plain = build(input_feeding=False)
    decoder = plain.decoder

    def whole_target(b: Batch) -> None:
        plain.zero_grad(set_to_none=True)
        plain(b.src, b.src_lengths, b.tgt_in, need_attention=False).logits.sum().backward()

    def step_loop(b: Batch) -> None:  # the same model call, its decoder on the step loop every decoder inherits
        plain.zero_grad(set_to_none=True)
        with mock.patch.object(type(decoder), "forward_features", RNNDecoder.forward_features):
            plain(b.src, b.src_lengths, b.tgt_in, need_attention=False).logits.sum().backward()

    row("Luong without input feeding: all target steps in one call, forward + backward",
        mean_seconds(step_loop, bucketed), mean_seconds(whole_target, bucketed), note_before="step loop",
        note_after="one RNN call + one attention call")

    # 4. key projection once per source, in greedy search
    plain.eval()
    sources = [(b.src[:64], b.src_lengths[:64]) for b in bucketed[:5]]
    greedy = DecodeConfig(beam_size=1, max_len_a=0.0, max_len_b=30)

    class KeysEveryStep:
        """The same model, but the attention's keys are projected again at every step."""

        def __getattr__(self, name: str):
            return getattr(plain, name)

        def step(self, prev, state, enc):
            return plain.step(prev, state, enc.with_keys(decoder.project_keys(enc.states)))

    def decode_with(model_like) -> Callable[[tuple], None]:
        return lambda s: search(model_like, s[0], s[1], greedy)

    row("key projection once per source: greedy search, 64 sentences",
        mean_seconds(decode_with(KeysEveryStep()), sources, 1), mean_seconds(decode_with(plain), sources, 1),
        note_before="projected every step", note_after="once per source")

    # 5. beam search over the batch
    beam = DecodeConfig(beam_size=5, max_len_a=0.0, max_len_b=30)
    src, lengths = sources[0]

    def one_by_one(_: object) -> None:
        for i in range(src.size(0)):
            n = int(lengths[i])
            search(plain, src[i:i + 1, :n], lengths[i:i + 1], beam)

    def all_at_once(_: object) -> None:
        search(plain, src, lengths, beam)

    row("beam 5 vectorised over batch x beam: 64 sentences", mean_seconds(one_by_one, [None] * 3, 1),
        mean_seconds(all_at_once, [None] * 3, 1), note_before="one sentence at a time", note_after="64 at once")

    # 6. two-level candidate selection, on wide target vocabularies
    full_length = DecodeConfig(beam_size=5, min_len=30, max_len_a=0.0, max_len_b=30)
    for vocab in (8000, 32000):
        torch.manual_seed(args.seed)
        wide = build_model(ModelConfig(embed_size=args.embed, hidden_size=args.hidden, dropout=0.0),
                           src_vocab_size=src_vocab, tgt_vocab_size=vocab).eval()

        def decode(s: tuple, wide: torch.nn.Module = wide) -> None:
            search(wide, s[0], s[1], full_length)

        with mock.patch.object(heed.search, "_TWO_LEVEL_MIN_VOCAB_PER_CANDIDATE", 10**9):  # never two levels
            one_topk = mean_seconds(decode, sources, 1)
        two_levels = mean_seconds(decode, sources, 1)
        row(f"beam 5 candidates from each beam's best 10 (two-level top-k): 64 sentences, 31 steps, "
            f"target vocabulary {vocab:,}", one_topk, two_levels,
            note_before="one top-k over beam x vocab", note_after="two levels")
    if args.groups:
        encoder_by_groups(args.embed, args.hidden)


def encoder_by_groups(embed: int, hidden: int) -> None:
    """Section 6: packed against by length for 1..20 distinct lengths, LSTM and GRU."""
    from heed.nn.rnn.encoder import RNNEncoder

    print()
    print("| encoder | distinct lengths | training: packed → by length | decoding: packed → by length |")
    print("|---|---:|---:|---:|")
    for rnn in ("lstm", "gru"):
        torch.manual_seed(0)
        encoder = RNNEncoder(vocab_size=50, embed_size=embed, hidden_size=hidden, rnn=rnn)
        for groups in (1, 2, 3, 4, 6, 20):
            lengths = torch.tensor([30 - (i % groups) for i in range(BATCH)])
            embedded = torch.randn(BATCH, 30, embed, requires_grad=True)
            distinct, counts = torch.unique(lengths, return_counts=True)
            runs = {"packed": lambda e=encoder, x=embedded, n=lengths: e._run_packed(x, n),
                    "by length": lambda e=encoder, x=embedded, n=lengths, d=distinct, c=counts: e._run_by_length(
                        x, n, d.tolist(), c.tolist())}
            cells = []
            for training in (True, False):
                times = {}
                for name, run in runs.items():
                    def once(_: object, run=run, training=training) -> None:
                        if training:
                            run()[0].sum().backward()
                        else:
                            with torch.inference_mode():
                                run()
                    times[name] = mean_seconds(once, [None] * 10)
                cells.append(f"{1e3 * times['packed']:.1f} → {1e3 * times['by length']:.1f} ms "
                             f"({times['packed'] / times['by length']:.2f}×)")
            print(f"| {rnn} | {groups} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
