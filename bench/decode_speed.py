"""Decoding speed: sentences per second for greedy and beam search, as a markdown table.

    OMP_NUM_THREADS=1 .venv/bin/python bench/decode_speed.py [--devices cpu cuda] [--seconds 2]
        [--precisions float32 bfloat16]

Randomly initialised models (speed does not depend on the weights, only on how many steps run):
- "256/8000": embed 256, hidden 256, vocab 8000 (a realistic subword model), max 30 steps;
- "dates":    embed 64, hidden 128, character vocab 80 (the dates task), max 11 steps (10 chars + EOS);
- "transformer 256/8000": 3 + 3 pre-norm layers of 256, 4 heads, feed-forward 1,024, vocab 8000 (the
  Multi30k Transformer recipe's shape), max 30 steps.
Sources are ~20 tokens (lengths 16..24). `min_len` is set to the maximum so that a random model,
which would end at a random step, decodes every step: the worst case, and the same work every run.
Batch 1 decodes sentences one at a time; batch 64 decodes them 64 at once.
bfloat16 is what `heed translate --bf16` does: the weights cast once, autocast around the search.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import time
from dataclasses import dataclass

import torch

from heed.nn.build import ModelConfig, build_model
from heed.search import DecodeConfig, search


@dataclass(frozen=True)
class Setting:
    name: str
    embed: int
    hidden: int
    vocab: int
    max_tokens: int  # output tokens before the forced EOS; steps = max_tokens + 1
    transformer: bool = False

    def config(self) -> ModelConfig:
        if self.transformer:
            return ModelConfig(family="transformer", layers=3, d_model=self.hidden, heads=4, ff_size=4 * self.hidden,
                               dropout=0.0, attention_dropout=0.0)
        return ModelConfig(embed_size=self.embed, hidden_size=self.hidden, dropout=0.0)


SETTINGS = [Setting("256/8000", 256, 256, 8000, 29), Setting("dates", 64, 128, 80, 10),
            Setting("transformer 256/8000", 256, 256, 8000, 29, transformer=True)]


def make_sources(n: int, vocab: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """src (n, 24) ids 3..vocab-1 with PAD (0) after each length; lengths (n,) in 16..24."""
    lengths = torch.randint(16, 25, (n,), generator=gen)
    src = torch.randint(3, vocab, (n, 24), generator=gen)
    return src.masked_fill(torch.arange(24) >= lengths.unsqueeze(1), 0), lengths


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def sentences_per_second(model, src, lengths, cfg: DecodeConfig, batch: int, seconds: float,
                         device: torch.device) -> tuple[float, float]:
    """Decode `src` in batches of `batch` until at least `seconds` have passed (after one warm-up
    batch). Returns (sentences per second, milliseconds per batch)."""
    batches = [(src[i:i + batch].to(device), lengths[i:i + batch].to(device))
               for i in range(0, src.size(0), batch)]
    search(model, *batches[0], cfg)  # warm-up: allocator, kernels, lazy init
    sync(device)
    done, n_batches, start = 0, 0, time.perf_counter()
    while True:
        for s, n in batches:
            search(model, s, n, cfg)
            done += s.size(0)
            n_batches += 1
        sync(device)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return done / elapsed, 1000 * elapsed / n_batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", nargs="+", default=["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 64])
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 5])
    parser.add_argument("--seconds", type=float, default=2.0, help="minimum timed seconds per row")
    parser.add_argument("--precisions", nargs="+", default=["float32"], choices=["float32", "bfloat16"])
    args = parser.parse_args()

    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU thread(s)"
          + (f", {torch.cuda.get_device_name()}" if "cuda" in args.devices else ""))
    print()
    print("| model | device | precision | search | batch | sentences/s | ms/batch |")
    print("|---|---|---|---|---:|---:|---:|")
    gen = torch.Generator().manual_seed(0)
    for setting in SETTINGS:
        torch.manual_seed(0)
        model = build_model(setting.config(), src_vocab_size=setting.vocab, tgt_vocab_size=setting.vocab).eval()
        src, lengths = make_sources(64, setting.vocab, gen)
        for device_name in args.devices:
            device = torch.device(device_name)
            for precision in args.precisions:
                bf16 = precision == "bfloat16"
                decoder = copy.deepcopy(model).to(device, torch.bfloat16 if bf16 else torch.float32)
                autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
                for beam in args.beams:
                    cfg = DecodeConfig(beam_size=beam, max_len_a=0.0, max_len_b=setting.max_tokens,
                                       min_len=setting.max_tokens)
                    for batch in args.batches:
                        sents = src if batch > 1 else src[:8]  # batch 1: 8 sentences one by one
                        with autocast:
                            rate, ms = sentences_per_second(decoder, sents, lengths[:sents.size(0)], cfg, batch,
                                                            args.seconds, device)
                        label = "greedy" if beam == 1 else f"beam {beam}"
                        print(f"| {setting.name} | {device_name} | {precision} | {label} | {batch} | {rate:,.1f} "
                              f"| {ms:,.1f} |", flush=True)


if __name__ == "__main__":
    main()
