"""The GEMM floor: the matrix products a training step (or a beam decode) of the compared model
cannot avoid, each timed alone on this machine, in float32 and in bfloat16.

    .venv/bin/python bench/gemm_floor.py --data DIR --embed 256 --hidden 256 [--threads 1]
        [--peer-tok-per-s 4751] [--decode-model MODEL_DIR --decode-input FILE --beam 5 --batch-size 64
         --max-len 60 --peer-sent-per-s 258.7] [--json OUT.json]

The model is the one bench/compare trains: a bidirectional LSTM encoder (hidden / 2 per direction),
an LSTM decoder with input feeding and Luong general attention, h~ = tanh(W_c [h; c]), the output
projection. bench/floor.py's floor drops the attention and the input feeding; this one keeps the
model whole but counts only its matrix products, grouped the cheapest legal way:

- per time step (a recurrence forbids batching them over time): the encoder's recurrent products
  and, in the decoder, [h~_{t-1}; h_{t-1}] @ [W_ih,feed; W_hh], the two attention bmm's and W_c,
  forward and their input gradients backward;
- once per batch (batchable over time): the input projections of the embeddings, the key
  projection (general score), the output projection, and every weight gradient;
- rows: the real tokens (packed sequences, as if no padding were ever computed) and, per step,
  only the sentences still running.

Each distinct shape is timed with torch.mm / torch.bmm on random operands (median of repeats) and
multiplied by how often a step needs it. Element-wise work (gates, softmax, tanh, the loss, Adam)
is left out, so the sum is a lower bound that no implementation of this model in that precision can
beat on this machine: a toolkit at 2x a peer's throughput would have to be faster than it.

The decode part does the same for a beam search: it runs heed's own search on `--decode-input`
with a trained model, counts the decoder rows at every step (the live beams of the sentences not yet
done), and times the per-step products for those row counts plus the encoder's.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floor import BATCH, EMBED, HIDDEN, PAD, corpus_lengths, make_batches

Shape = tuple[str, int, int, int]  # ("mm", m, k, n): (m, k) @ (k, n); ("bmm", b, s, h): b x (1, h) @ (h, s) & back


def training_gemms(batches: list[tuple[list[int], list[int]]], *, embed: int, hidden: int,
                   tgt_vocab: int) -> Counter[Shape]:
    """How often each product occurs over `batches` (each: source lengths with EOS, target lengths
    with EOS) in forward + backward."""
    h_enc, gates_enc, gates = hidden // 2, 2 * hidden, 4 * hidden
    count: Counter[Shape] = Counter()

    def linear(m: int, k: int, n: int, *, input_grad: bool = True) -> None:
        """Y (m, n) = X (m, k) @ W (k, n): forward, dW = X^T dY, and dX = dY W^T."""
        if m == 0:
            return
        count["mm", m, k, n] += 1
        count["mm", k, m, n] += 1
        if input_grad:
            count["mm", m, n, k] += 1

    for src_lens, tgt_lens in batches:
        n_src, n_tgt = sum(src_lens), sum(tgt_lens)
        for _ in range(2):  # encoder directions
            linear(n_src, embed, gates_enc)  # input projection over all steps
            for t in range(max(src_lens)):  # recurrence: (rows still running, h) @ (h, 4h), and dh back
                rows = sum(length > t for length in src_lens)
                count["mm", rows, h_enc, gates_enc] += 1
                count["mm", rows, gates_enc, h_enc] += 1
            count["mm", h_enc, n_src, gates_enc] += 1  # dW_hh over all steps
        linear(n_src, hidden, hidden)  # keys = memory W_a (general score)
        linear(n_tgt, embed, gates)  # the decoder's embedding part of W_ih, all steps at once
        for t in range(max(tgt_lens)):
            rows = sum(length > t for length in tgt_lens)
            count["mm", rows, 2 * hidden, gates] += 1  # [h~_{t-1}; h_{t-1}] @ [W_ih,feed; W_hh]
            count["mm", rows, gates, 2 * hidden] += 1  # its input gradient
            count["bmm", rows, max(src_lens), hidden] += 3  # scores and context (+ their backward, ~2x)
            count["mm", rows, 2 * hidden, hidden] += 1  # W_c [h; c]
            count["mm", rows, hidden, 2 * hidden] += 1  # its input gradient
        count["mm", 2 * hidden, n_tgt, gates] += 1  # dW of [W_ih,feed; W_hh]
        count["mm", 2 * hidden, n_tgt, hidden] += 1  # dW_c
        linear(n_tgt, hidden, tgt_vocab)  # output projection
    return count


def decode_gemms(rows_per_step: list[int], encoder_batches: list[list[int]], *, embed: int, hidden: int,
                 src_len_per_step: list[int], tgt_vocab: int) -> Counter[Shape]:
    """The forward products of a beam decode: per step, the decoder's for that many rows; per batch,
    the encoder's (src lengths with EOS)."""
    gates = 4 * hidden
    count: Counter[Shape] = Counter()
    for src_lens in encoder_batches:
        for _ in range(2):
            count["mm", sum(src_lens), embed, 2 * hidden] += 1
            for t in range(max(src_lens)):
                count["mm", sum(length > t for length in src_lens), hidden // 2, 2 * hidden] += 1
        count["mm", sum(src_lens), hidden, hidden] += 1  # keys
    for rows, src_len in zip(rows_per_step, src_len_per_step):
        count["mm", rows, embed + 2 * hidden, gates] += 1  # [y_{t-1}; h~_{t-1}; h_{t-1}] @ weights
        count["bmm", rows, src_len, hidden] += 1  # scores and context: one bmm-pair's worth
        count["mm", rows, 2 * hidden, hidden] += 1  # W_c
        count["mm", rows, hidden, tgt_vocab] += 1  # output projection
    return count


def time_shape(shape: Shape, dtype: torch.dtype, repeats: int) -> float:
    """Median seconds of one product of this shape."""
    kind, a, b, c = shape
    if kind == "mm":
        x, w = torch.randn(a, b, dtype=dtype), torch.randn(b, c, dtype=dtype)
        run = lambda: torch.mm(x, w)
    else:  # b x (1, h) @ (h, s) and b x (1, s) @ (s, h): one score and one context product
        q, keys = torch.randn(a, 1, c, dtype=dtype), torch.randn(a, c, b, dtype=dtype)
        p, values = torch.randn(a, 1, b, dtype=dtype), torch.randn(a, b, c, dtype=dtype)
        run = lambda: (torch.bmm(q, keys), torch.bmm(p, values))
    for _ in range(3):
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def total_seconds(count: Counter[Shape], dtype: torch.dtype, repeats: int) -> float:
    return sum(n * time_shape(shape, dtype, repeats) for shape, n in count.items())


def batch_lengths(src_lens: list[int], tgt_lens: list[int], *, n_batches: int,
                  seed: int) -> list[tuple[list[int], list[int]]]:
    """The source and target lengths (with EOS) of bench/floor.py's batches."""
    batches = make_batches(src_lens, tgt_lens, src_vocab=8, tgt_vocab=8, n_batches=n_batches, seed=seed)
    return [(b["src_lengths"].tolist(), (b["tgt_out"] != PAD).sum(1).tolist()) for b in batches]


class RecordedDecode(NamedTuple):
    """What one run of heed's beam search did, for `decode_gemms`."""

    rows: list[int]  # decoder rows at every step
    src_len: list[int]  # the padded source length at every step
    batches: list[list[int]]  # the source lengths of every batch
    sentences: int
    seconds: float  # the translate call alone
    embed: int  # the model's sizes
    hidden: int
    tgt_vocab: int


def record_decode(model_dir: Path, input_file: Path, *, beam: int, batch_size: int, max_len: int) -> RecordedDecode:
    """Load the model once and run heed's beam search on `input_file`, counting as it goes."""
    import heed

    translator = heed.load(str(model_dir), device="cpu")
    model = translator.model
    rows, src_len, batches = [], [], []
    step, encode = model.step, model.encode

    def counting_step(prev, state, enc):
        rows.append(prev.size(0))
        src_len.append(enc.mask.size(1))
        return step(prev, state, enc)

    def counting_encode(src, src_lengths):
        batches.append(src_lengths.tolist())
        return encode(src, src_lengths)

    model.step, model.encode = counting_step, counting_encode
    texts = input_file.read_text(encoding="utf-8").splitlines()
    start = time.perf_counter()
    with torch.inference_mode():
        translator.translate(texts, beam=beam, batch_size=batch_size, max_len_a=0.0, max_len_b=max_len,
                             length_penalty=0.0)
    seconds = time.perf_counter() - start
    cfg = translator.config.model
    return RecordedDecode(rows, src_len, batches, len(texts), seconds, cfg.embed_size, cfg.hidden_size,
                          len(translator.codec.tgt_vocab))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, help="folder with train.src/train.tgt (lengths, vocab); else the dates mix")
    p.add_argument("--embed", type=int, default=EMBED)
    p.add_argument("--hidden", type=int, default=HIDDEN)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batches", type=int, default=20, help="training batches to count over")
    p.add_argument("--repeats", type=int, default=30, help="timings per shape (median)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--peer-tok-per-s", type=float, help="the fastest peer's training tok/s (for the 2x check)")
    p.add_argument("--decode-model", type=Path, help="a trained heed model directory: also the decode floor")
    p.add_argument("--decode-input", type=Path, help="the sentences to decode")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-len", type=int, default=60)
    p.add_argument("--peer-sent-per-s", type=float, help="the fastest peer's decode sentences/s (for the 3x check)")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16}

    src_lens, tgt_lens, _, tgt_vocab, _ = corpus_lengths(args.data, args.seed)
    batches = batch_lengths(src_lens, tgt_lens, n_batches=args.batches, seed=args.seed)
    tokens_per_step = statistics.mean(sum(t) for _, t in batches)
    count = training_gemms(batches, embed=args.embed, hidden=args.hidden, tgt_vocab=tgt_vocab)
    result: dict = {"threads": args.threads, "embed": args.embed, "hidden": args.hidden, "tgt_vocab": tgt_vocab,
                    "batch": BATCH, "tokens_per_step": tokens_per_step, "train": {}}
    print(f"GEMM floor on {torch.get_num_threads()} thread(s): embed {args.embed}, hidden {args.hidden}, "
          f"target vocabulary {tgt_vocab}, batch {BATCH}, {tokens_per_step:.0f} target tokens per step "
          f"(mean of {len(batches)} batches), {sum(count.values()):,} products per {len(batches)} steps")
    for name, dtype in dtypes.items():
        step = total_seconds(count, dtype, args.repeats) / len(batches)
        tok_per_s = tokens_per_step / step
        result["train"][name] = {"step_s": step, "max_tok_per_s": tok_per_s}
        line = f"  training, {name:<8}: {step * 1e3:7.1f} ms/step of products alone -> at most {tok_per_s:9,.0f} tok/s"
        if args.peer_tok_per_s:
            need = 2 * args.peer_tok_per_s
            line += f"; 2x the peer needs {need:,.0f} tok/s ({need / tok_per_s:.0%} of it)"
        print(line)

    if args.decode_model is not None:
        run = record_decode(args.decode_model, args.decode_input, beam=args.beam, batch_size=args.batch_size,
                            max_len=args.max_len)
        rows, n_sents, heed_s = run.rows, run.sentences, run.seconds
        dcount = decode_gemms(rows, run.batches, embed=run.embed, hidden=run.hidden, src_len_per_step=run.src_len,
                              tgt_vocab=run.tgt_vocab)
        result["decode"] = {"sentences": n_sents, "beam": args.beam, "batch": args.batch_size, "steps": len(rows),
                            "decoder_rows": sum(rows), "heed_s": heed_s}
        print(f"decode: heed beam {args.beam}, batch {args.batch_size} on {n_sents:,} sentences: {len(rows):,} "
              f"decoder steps, {sum(rows):,} decoder rows; heed took {heed_s:.2f} s ({n_sents / heed_s:,.1f} sent/s)")
        for name, dtype in dtypes.items():
            seconds = total_seconds(dcount, dtype, args.repeats)
            result["decode"][name] = {"s": seconds, "max_sent_per_s": n_sents / seconds}
            line = (f"  decode, {name:<8}: {seconds:6.2f} s of products alone -> at most "
                    f"{n_sents / seconds:8,.1f} sent/s; heed reaches {seconds / heed_s:.0%} of that")
            if args.peer_sent_per_s:
                need = 3 * args.peer_sent_per_s
                line += f"; 3x the peer needs {need:,.1f} sent/s ({need * seconds / n_sents:.0%} of it)"
            print(line)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
