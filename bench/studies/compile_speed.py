"""train.compile, before and after: heed's training step with the decoder's teacher-forced pass
eager (the hand-written input-feeding node, heed.nn.rnn.feeding, where it applies) and under
torch.compile (Seq2Seq.compile_teacher_forced), on the same batches, interleaved batch by batch
so that load on a shared machine falls on both alike.

    OMP_NUM_THREADS=1 .venv/bin/python bench/studies/compile_speed.py [--model compare|demo] [--steps 30]
    OMP_NUM_THREADS=1 .venv/bin/python bench/studies/compile_speed.py --decode MODEL_DIR --input SRC [--beam 1]

--model compare: bench/compare's dates model (embed 64, biLSTM 64+64, LSTM decoder 128, Luong
general attention with input feeding, no dropout), batches of 128 sentences with bench/floor.py's
dates length mix (every target 11 tokens). --model demo: configs/demo.yaml's model (no input
feeding, dropout 0.1) on its own dates batches (6,000 tokens each).

With --decode, greedy (or --beam) search at batch 64 over the first 1,000 lines of SRC with a
trained model, eager against `Seq2Seq.step` under heed.plumbing.runtime.compile_function (the search's
one-step call; the batch shrinks as sentences finish), after a 200-sentence warm-up that compiles.

A step is what the trainer does: forward, heed.nn.loss.generator_loss, backward, clip, fused Adam.
Compile time: the wall time of the compiled model's first step (it compiles the forward and the
backward), reported apart; both models then take 5 warm-up steps, and `--steps` timed steps follow.
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import floor

from heed.config import load_config
from heed.data.batching import token_batches
from heed.data.codec import Codec, load_corpora
from heed.data.vocab import PAD
from heed.nn.build import ModelConfig, build_model
from heed.nn.loss import generator_loss
from heed.plumbing.runtime import compiler_problem


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


def decode(model_dir: Path, source: Path, beam: int) -> None:
    import heed
    from heed.plumbing.runtime import compile_function

    texts = source.read_text(encoding="utf-8").splitlines()[:1000]
    eager, compiled = heed.load(str(model_dir)), heed.load(str(model_dir))
    compiled.model.step = compile_function(compiled.model.step)

    def run(translator, n: int) -> tuple[float, list[str]]:
        start = time.perf_counter()
        with torch.inference_mode():
            out = translator.translate(texts[:n], beam=beam, batch_size=64, max_len_a=0.0, max_len_b=20,
                                       length_penalty=0.0)
        return time.perf_counter() - start, [t.text for t in out]

    compile_s, _ = run(compiled, 200)
    run(eager, 200)
    seconds = {"eager": 0.0, "compiled": 0.0}
    outputs = {}
    for _ in range(2):
        for name, translator in (("eager", eager), ("compiled", compiled)):
            took, outputs[name] = run(translator, len(texts))
            seconds[name] += took
    print(f"decode beam {beam}, batch 64, {len(texts):,} sentences twice; compile (200-sentence warm-up): "
          f"{compile_s:.1f} s; same outputs: {outputs['eager'] == outputs['compiled']}")
    for name, took in seconds.items():
        print(f"{name:9s} {2 * len(texts) / took:9,.1f} sentences/s  {seconds['eager'] / took:.2f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["compare", "demo"], default="compare")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--decode", type=Path, metavar="MODEL_DIR", help="time decoding with this model instead")
    p.add_argument("--input", type=Path, help="with --decode: source sentences, one a line")
    p.add_argument("--beam", type=int, default=1)
    args = p.parse_args()
    problem = compiler_problem()
    if problem is not None:
        sys.exit(problem)
    torch.set_num_threads(args.threads)
    if args.decode is not None:
        if args.input is None:
            p.error("--decode needs --input")
        decode(args.decode, args.input, args.beam)
        return
    cfg, src_vocab, tgt_vocab, batches = (compare_setup if args.model == "compare" else demo_setup)(40)
    torch.manual_seed(0)
    base = build_model(cfg, src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab)
    runs = {}
    for name in ("eager", "compiled"):
        model = copy.deepcopy(base)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
        if name == "compiled":
            model.compile_teacher_forced()  # its forward_features in training mode
        runs[name] = (model, optimizer, model.forward_features)

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
