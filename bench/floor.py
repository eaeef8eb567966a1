"""The floor: how fast one training step of the dates model *could* be on this machine.

    OMP_NUM_THREADS=1 .venv/bin/python bench/floor.py [--data DIR] [--threads 1] [--steps 60]
                                                      [--heed-tok-per-s 12345] [--json OUT.json]

Three things are timed on the same batches (batch 128, dates lengths: with `--data DIR`, the
lengths of DIR/train.src and DIR/train.tgt from /work/shared/bench/peers/make_data.py, else the
same length mix built in), all with embed 64, a bidirectional LSTM encoder of 64 per direction, an
LSTM decoder of 128 (other sizes: --embed E --hidden H, the encoder H/2 per direction) and the output
projection + cross-entropy:

1. floor        bare PyTorch, forward + backward only: the encoder biLSTM over the padded source
                (no packing), the decoder LSTM over the whole target in one call (no attention,
                no input feeding, so no loop over time), the projection and the loss. Every RNN
                toolkit training this model does at least this work, so none can beat this time.
   floor+adam   the same plus zero_grad, clip and an Adam step: the floor of a whole update.
2. bare model   the real model in ~30 lines of bare PyTorch: Luong general attention and input
                feeding (so an LSTMCell loop over target steps), packed encoder, forward + backward
                + clip + Adam. The cost of the math itself, with no toolkit around it.
3. heed model   heed's own Seq2Seq (heed.nn.build) for the same config, forward + backward + clip
                + Adam, outside heed's trainer (no batching, logging or bookkeeping).

With `--heed-tok-per-s` (heed's training throughput from a real run, target tokens/s), heed's
trainer step time is also printed as a multiple of the floor; bench/compare passes it, and the
same for every peer.
Means over `--steps` timed steps after 10 warm-up steps, cycling over the batches (means, as a
trainer's tokens/s is one: the source length, and so the step time, varies from batch to batch).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

PAD, BOS, EOS = 0, 1, 2
BATCH = 128
EMBED, HIDDEN = 64, 128  # the dates sizes; --embed/--hidden for others (encoder: HIDDEN // 2 per direction)


# ----------------------------------------------------------------------------------- batches


def builtin_lengths(n: int, seed: int) -> tuple[list[int], list[int]]:
    """Source and target token counts (without EOS) drawn like make_data.py's 8 date formats:
    sources 8..29 characters, every target 10 ("YYYY-MM-DD")."""
    rng = random.Random(seed)
    # typical lengths of the 8 formats, each with its day/month spread
    formats = [(15, 6), (14, 6), (11, 1), (10, 0), (8, 2), (23, 9), (11, 1), (14, 6)]
    src = []
    for _ in range(n):
        base, spread = rng.choice(formats)
        src.append(base + rng.randint(0, spread))
    return src, [10] * n


def file_lengths(data: Path) -> tuple[list[int], list[int], int, int]:
    """Token counts of DIR/train.src / .tgt and the two vocabulary sizes (+ 4 specials, as heed
    and OpenNMT-py count them)."""
    def read(path: Path) -> tuple[list[int], int]:
        lengths, vocab = [], set()
        for line in path.read_text(encoding="utf-8").splitlines():
            tokens = line.split()
            lengths.append(len(tokens))
            vocab.update(tokens)
        return lengths, len(vocab) + 4

    src, src_vocab = read(data / "train.src")
    tgt, tgt_vocab = read(data / "train.tgt")
    return src, tgt, src_vocab, tgt_vocab


def corpus_lengths(data: Path | None, seed: int) -> tuple[list[int], list[int], int, int, str]:
    """Source and target token counts, the two vocabulary sizes and where they came from: DIR/train.*
    (`file_lengths`) when `data` is given, else the built-in dates length mix (37 source and 15
    target symbols)."""
    if data is not None:
        src_lens, tgt_lens, src_vocab, tgt_vocab = file_lengths(data)
        return src_lens, tgt_lens, src_vocab, tgt_vocab, str(data)
    src_lens, tgt_lens = builtin_lengths(20000, seed)
    return src_lens, tgt_lens, 37, 15, "built-in dates length mix"


def make_batches(src_lens: list[int], tgt_lens: list[int], *, src_vocab: int, tgt_vocab: int, n_batches: int,
                 seed: int) -> list[dict[str, Tensor]]:
    """`n_batches` length-bucketed batches of BATCH random sentences (ids random, lengths real):
    shuffle, sort pools of 100 batches by length, cut into BATCH, as heed/OpenNMT-py/fairseq do."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    order = list(range(len(src_lens)))
    rng.shuffle(order)
    pool = sorted(order[: 100 * BATCH], key=lambda i: (src_lens[i], tgt_lens[i]))
    groups = [pool[k:k + BATCH] for k in range(0, len(pool) - BATCH + 1, BATCH)]
    rng.shuffle(groups)
    batches = []
    for group in groups[:n_batches]:
        s_len = torch.tensor([src_lens[i] + 1 for i in group])  # + EOS
        t_len = torch.tensor([tgt_lens[i] + 1 for i in group])  # BOS + ids / ids + EOS
        S, T = int(s_len.max()), int(t_len.max())
        src = torch.randint(4, src_vocab, (BATCH, S), generator=gen)
        src = src.masked_fill(torch.arange(S) >= s_len.unsqueeze(1), PAD)
        tgt_out = torch.randint(4, tgt_vocab, (BATCH, T), generator=gen)
        tgt_out = tgt_out.masked_fill(torch.arange(T) >= t_len.unsqueeze(1), PAD)
        tgt_in = torch.cat([torch.full((BATCH, 1), BOS), tgt_out[:, :-1]], 1)  # BOS + ids (ids random)
        tgt_in = tgt_in.masked_fill(torch.arange(T) >= t_len.unsqueeze(1), PAD)
        batches.append({"src": src, "src_lengths": s_len, "tgt_in": tgt_in, "tgt_out": tgt_out,
                        "tokens": int(t_len.sum())})
    return batches


# ------------------------------------------------------------------------------------ models


class FloorModel(nn.Module):
    """Only the unavoidable work: two cuDNN-style whole-sequence LSTMs, a projection, the loss."""

    def __init__(self, src_vocab: int, tgt_vocab: int, embed: int = EMBED, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.src_embed = nn.Embedding(src_vocab, embed, padding_idx=PAD)
        self.encoder = nn.LSTM(embed, hidden // 2, batch_first=True, bidirectional=True)
        self.tgt_embed = nn.Embedding(tgt_vocab, embed, padding_idx=PAD)
        self.decoder = nn.LSTM(embed, hidden, batch_first=True)
        self.out = nn.Linear(hidden, tgt_vocab)

    def loss(self, b: dict[str, Tensor]) -> Tensor:
        _, (h, c) = self.encoder(self.src_embed(b["src"]))  # h, c: (2, batch, hidden / 2)
        h0 = torch.cat([h[0], h[1]], -1).unsqueeze(0)  # (1, batch, hidden)
        c0 = torch.cat([c[0], c[1]], -1).unsqueeze(0)
        states, _ = self.decoder(self.tgt_embed(b["tgt_in"]), (h0, c0))  # (batch, tgt_len, 128)
        logits = self.out(states)  # (batch, tgt_len, vocab)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), b["tgt_out"].reshape(-1), ignore_index=PAD,
                               reduction="sum") / b["tokens"]


class BareModel(nn.Module):
    """The benchmarked model in bare PyTorch: packed biLSTM encoder, LSTMCell decoder with input
    feeding and Luong general attention, h~ = tanh(W_c [h; c]) (Luong et al. 2015, eq. 5)."""

    def __init__(self, src_vocab: int, tgt_vocab: int, embed: int = EMBED, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.hidden = hidden
        self.src_embed = nn.Embedding(src_vocab, embed, padding_idx=PAD)
        self.encoder = nn.LSTM(embed, hidden // 2, batch_first=True, bidirectional=True)
        self.tgt_embed = nn.Embedding(tgt_vocab, embed, padding_idx=PAD)
        self.cell = nn.LSTMCell(embed + hidden, hidden)
        self.w_a = nn.Linear(hidden, hidden, bias=False)
        self.w_c = nn.Linear(2 * hidden, hidden, bias=False)
        self.out = nn.Linear(hidden, tgt_vocab)

    def loss(self, b: dict[str, Tensor]) -> Tensor:
        src, lengths = b["src"], b["src_lengths"]
        packed = pack_padded_sequence(self.src_embed(src), lengths, batch_first=True, enforce_sorted=False)
        out, (h, c) = self.encoder(packed)
        memory, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))  # (batch, src_len, 128)
        keys = self.w_a(memory)  # (batch, src_len, 128)
        pad = src == PAD  # (batch, src_len)
        h, c = torch.cat([h[0], h[1]], -1), torch.cat([c[0], c[1]], -1)  # (batch, 128)
        feed = memory.new_zeros(src.size(0), self.hidden)
        embedded = self.tgt_embed(b["tgt_in"])  # (batch, tgt_len, 64)
        outputs = []
        for t in range(embedded.size(1)):
            h, c = self.cell(torch.cat([embedded[:, t], feed], -1), (h, c))
            scores = torch.bmm(keys, h.unsqueeze(2)).squeeze(2).masked_fill(pad, float("-inf"))  # (batch, src_len)
            context = torch.bmm(scores.softmax(-1).unsqueeze(1), memory).squeeze(1)  # (batch, 128)
            feed = torch.tanh(self.w_c(torch.cat([h, context], -1)))
            outputs.append(feed)
        logits = self.out(torch.stack(outputs, 1))  # (batch, tgt_len, vocab)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), b["tgt_out"].reshape(-1), ignore_index=PAD,
                               reduction="sum") / b["tokens"]


class HeedModel(nn.Module):
    """heed's Seq2Seq for the same config, with the loss heed's trainer computes."""

    def __init__(self, src_vocab: int, tgt_vocab: int, embed: int = EMBED, hidden: int = HIDDEN) -> None:
        super().__init__()
        from heed.nn.build import ModelConfig, build_model

        cfg = ModelConfig(decoder="luong", attention="general", input_feeding=True, rnn="lstm", embed_size=embed,
                          hidden_size=hidden, bidirectional=True, bridge="copy", dropout=0.0)
        self.model = build_model(cfg, src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab)

    def loss(self, b: dict[str, Tensor]) -> Tensor:
        logits = self.model(b["src"], b["src_lengths"], b["tgt_in"], need_attention=False).logits
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), b["tgt_out"].reshape(-1), ignore_index=PAD,
                               reduction="sum") / b["tokens"]


# ------------------------------------------------------------------------------------ timing


def time_steps(model: nn.Module, batches: list[dict[str, Tensor]], *, steps: int, update: bool) -> float:
    """Mean seconds of one step (forward + backward, and with `update` zero_grad + clip + Adam)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3) if update else None
    times = []
    for k in range(10 + steps):
        b = batches[k % len(batches)]
        start = time.perf_counter()
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
        else:
            model.zero_grad(set_to_none=True)
        model.loss(b).backward()
        if optimizer is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
        if k >= 10:
            times.append(time.perf_counter() - start)
    return statistics.mean(times)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, help="folder with train.src/train.tgt from make_data.py (lengths, vocab)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1, as in bench/compare)")
    p.add_argument("--steps", type=int, default=60, help="timed steps per measurement (after 10 warm-up)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--embed", type=int, default=EMBED, help=f"embedding size (default {EMBED}, the dates model)")
    p.add_argument("--hidden", type=int, default=HIDDEN, help=f"decoder hidden size (default {HIDDEN})")
    p.add_argument("--heed-tok-per-s", type=float, help="heed's training target tokens/s from a real run")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    src_lens, tgt_lens, src_vocab, tgt_vocab, source = corpus_lengths(args.data, args.seed)
    batches = make_batches(src_lens, tgt_lens, src_vocab=src_vocab, tgt_vocab=tgt_vocab, n_batches=20, seed=args.seed)
    tokens_per_step = statistics.mean(b["tokens"] for b in batches)

    floor = time_steps(FloorModel(src_vocab, tgt_vocab, args.embed, args.hidden), batches, steps=args.steps, update=False)
    floor_update = time_steps(FloorModel(src_vocab, tgt_vocab, args.embed, args.hidden), batches, steps=args.steps, update=True)
    bare = time_steps(BareModel(src_vocab, tgt_vocab, args.embed, args.hidden), batches, steps=args.steps, update=True)
    heed = time_steps(HeedModel(src_vocab, tgt_vocab, args.embed, args.hidden), batches, steps=args.steps, update=True)

    result = {"threads": args.threads, "lengths": source, "batch": BATCH, "embed": args.embed, "hidden": args.hidden,
              "tokens_per_step": tokens_per_step,
              "floor_s": floor, "floor_update_s": floor_update, "bare_model_s": bare, "heed_model_s": heed}
    print(f"floor on {torch.get_num_threads()} thread(s), batch {BATCH}, embed {args.embed}, hidden {args.hidden}, "
          f"lengths from {source}, "
          f"{tokens_per_step:.0f} target tokens per step; means of {args.steps} steps")
    rows = [("floor: bare LSTMs fwd+bwd", floor), ("floor + zero_grad/clip/Adam", floor_update),
            ("bare model (attention, input feeding) full step", bare), ("heed model, full step, outside trainer", heed)]
    if args.heed_tok_per_s:
        trainer = tokens_per_step / args.heed_tok_per_s
        result["heed_trainer_s"] = trainer
        rows.append(("heed trainer step (from its tok/s)", trainer))
    for name, seconds in rows:
        print(f"  {name:<50} {seconds * 1e3:8.1f} ms  {tokens_per_step / seconds:9,.0f} tok/s  "
              f"{seconds / floor:5.2f}x floor")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
