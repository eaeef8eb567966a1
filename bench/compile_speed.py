"""train.compile, before and after: heed's training step with the decoder's teacher-forced pass
eager (the hand-written input-feeding node, heed.nn.feeding, where it applies) and under
torch.compile (Seq2Seq.compiled_forward_features), on the same batches, interleaved batch by batch
so that load on a shared machine falls on both alike.

    OMP_NUM_THREADS=1 .venv/bin/python bench/compile_speed.py [--model compare|demo] [--steps 30]

--model compare: bench/compare's dates model (embed 64, biLSTM 64+64, LSTM decoder 128, Luong
general attention with input feeding, no dropout), batches of 128 sentences with bench/floor.py's
dates length mix (every target 11 tokens). --model demo: configs/demo.yaml's model (no input
feeding, dropout 0.1) on its own dates batches (6,000 tokens each).

A step is what the trainer does: forward, heed.nn.loss.generator_loss, backward, clip, fused Adam.
Compile time: the wall time of the compiled model's first step (it compiles the forward and the
backward), reported apart; both models then take 5 warm-up steps, and `--steps` timed steps follow.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import floor  # noqa: E402  (bench/floor.py: the dates model's batches)

from heed.config import load_config  # noqa: E402
from heed.data.batching import token_batches  # noqa: E402
from heed.data.vocab import PAD  # noqa: E402
from heed.nn.build import ModelConfig, build_model  # noqa: E402
from heed.nn.loss import generator_loss  # noqa: E402
from heed.pipeline import Codec, load_corpora  # noqa: E402
from heed.runtime import compiler_problem  # noqa: E402


def compare_setup(n_batches: int) -> tuple[ModelConfig, int, int, list[dict]]:
    src_lens, tgt_lens, src_vocab, tgt_vocab, _ = floor.corpus_lengths(None, 0)
    batches = floor.make_batches(src_lens, tgt_lens, src_vocab=src_vocab, tgt_vocab=tgt_vocab,
                                 n_batches=n_batches, seed=0)
    cfg = ModelConfig(decoder="luong", attention="general", input_feeding=True, embed_size=64, hidden_size=128,
                      dropout=0.0, bridge="copy")
    return cfg, src_vocab, tgt_vocab, batches


def demo_setup(n_batches: int) -> tuple[ModelConfig, int, int, list[dict]]:
    config = load_config(REPO / "configs" / "demo.yaml")
    corpora = load_corpora(config.data)
    codec = Codec.build(corpora.train, config.data, warn=lambda message: None)
    batches = token_batches(codec.encode_pairs(corpora.train), batch_tokens=config.data.batch_tokens,
                            max_sentences=config.data.max_sentences, shuffle=True, seed=0, epoch=0)
    chosen = [batches[k] for k in range(min(n_batches, len(batches)))]
    as_dicts = [{"src": b.src, "src_lengths": b.src_lengths, "tgt_in": b.tgt_in, "tgt_out": b.tgt_out,
                 "tokens": b.num_tgt_tokens} for b in chosen]
    return config.model, len(codec.src_vocab), len(codec.tgt_vocab), as_dicts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["compare", "demo"], default="compare")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    problem = compiler_problem()
    if problem is not None:
        sys.exit(problem)
    torch.set_num_threads(args.threads)
    cfg, src_vocab, tgt_vocab, batches = (compare_setup if args.model == "compare" else demo_setup)(40)
    torch.manual_seed(0)
    base = build_model(cfg, src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab)
    runs = {}
    for name in ("eager", "compiled"):
        model = copy.deepcopy(base)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
        forward = model.forward_features if name == "eager" else model.compiled_forward_features()
        runs[name] = (model, optimizer, forward)

    def step(name: str, batch: dict) -> float:
        model, optimizer, forward = runs[name]
        model.train()
        features = forward(batch["src"], batch["src_lengths"], batch["tgt_in"]).features
        loss_sum = generator_loss(features, model.decoder.generator, batch["tgt_out"], ignore_index=PAD)
        optimizer.zero_grad(set_to_none=True)
        (loss_sum / batch["tokens"]).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss_sum.item()

    started = time.perf_counter()
    step("compiled", batches[0])
    compile_s = time.perf_counter() - started
    step("eager", batches[0])
    for batch in batches[1:6]:
        for name in runs:
            step(name, batch)
    seconds = {name: 0.0 for name in runs}
    tokens = 0
    for k in range(args.steps):
        batch = batches[6 + k % (len(batches) - 6)]
        tokens += batch["tokens"]
        for name in runs:
            start = time.perf_counter()
            step(name, batch)
            seconds[name] += time.perf_counter() - start
    target_lengths = sorted({b["tgt_in"].size(1) for b in batches})
    print(f"model {args.model}: {sum(p.numel() for p in base.parameters()):,} parameters; {args.threads} thread(s); "
          f"{args.steps} timed steps, {tokens / args.steps:,.0f} target tokens a step; target lengths {target_lengths}")
    print(f"compile (the compiled model's first step): {compile_s:.1f} s")
    for name in runs:
        print(f"{name:9s} {1e3 * seconds[name] / args.steps:7.1f} ms/step  {tokens / seconds[name]:9,.0f} tok/s  "
              f"{seconds['eager'] / seconds[name]:.2f}x")


if __name__ == "__main__":
    main()
