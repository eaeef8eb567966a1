"""Beam search for one sentence: `heed.search.beam_search_one` (its bookkeeping on host lists)
against `beam_search` (the batched search, ~25 small tensor ops a step) on the same model and the
same sentences, one at a time, as `Translator.translate(..., batch_size=1)` decodes them.

    OMP_NUM_THREADS=1 .venv/bin/python bench/studies/beam_one.py MODEL SOURCES [--beam 5] [--max-len 20]
        [--sentences 300] [--rounds 3]

MODEL: a model directory or an exported one (ONNX or anything heed.load reads that runs heed's
search). Sources are tokenized as the model's Translator does; each round times both searches
over every sentence, alternating which goes first; the best round of each is reported, and the
hypotheses (tokens, scores, attention) are checked equal.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import heed
from heed.data.batching import sentence_batches
from heed.search import DecodeConfig, beam_search, beam_search_one


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("sources")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--max-len", type=int, default=20)
    p.add_argument("--sentences", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()

    torch.set_num_threads(1)
    translator = heed.load(args.model)
    model = translator.model
    lines = Path(args.sources).read_text(encoding="utf-8").splitlines()[:args.sentences]
    codec = translator.codec
    ids = [codec.src_ids(codec.src_tokens(line)[:translator.max_src_len]) for line in lines]
    # each sentence as translate_ids batches it: (1, src_len) ids + EOS, (1,)
    batches = [(b.src, b.src_lengths) for i in ids if i for b in sentence_batches([i], batch_size=1)]
    cfg = DecodeConfig(beam_size=args.beam, max_len_a=0.0, max_len_b=args.max_len, length_penalty=0.0)

    def batched() -> list:
        return [beam_search(model, src, lengths, cfg)[0] for src, lengths in batches]

    def one() -> list:
        return [beam_search_one(model, src, lengths, cfg) for src, lengths in batches]

    best = {"beam_search": float("inf"), "beam_search_one": float("inf")}
    outputs = {}
    with torch.inference_mode():
        for r in range(args.rounds):
            order = [("beam_search", batched), ("beam_search_one", one)]
            for name, fn in order if r % 2 == 0 else order[::-1]:
                start = time.perf_counter()
                outputs[name] = fn()
                best[name] = min(best[name], time.perf_counter() - start)
    a, b = outputs["beam_search"], outputs["beam_search_one"]
    same = all([(h.tokens, h.score, h.log_prob) for h in x] == [(h.tokens, h.score, h.log_prob) for h in y]
               and all(h.attention is None or torch.equal(h.attention, g.attention) for h, g in zip(x, y))
               for x, y in zip(a, b))
    n = len(batches)
    for name, seconds in best.items():
        print(f"{name}: {n / seconds:,.1f} sentences/s ({seconds * 1000 / n:.3f} ms a sentence)")
    print(f"speed-up {best['beam_search'] / best['beam_search_one']:.2f}x; hypotheses identical: {same} "
          f"({n} sentences, beam {args.beam}, best of {args.rounds} rounds, {torch.get_num_threads()} thread)")


if __name__ == "__main__":
    main()
