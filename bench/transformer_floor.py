"""The floor of a Transformer training step: how fast one step of a heed Transformer *could* be.

    .venv/bin/python bench/transformer_floor.py RUN [--device cpu|cuda] [--bf16] [--threads 1]
                                                [--steps 40] [--src FILE --tgt FILE] [--json OUT.json]

RUN is a heed training output directory (or its model/ directory): the sizes, dropout, label
smoothing and batch_tokens come from its config.yaml, the tokenizers and vocabularies from its
model directory, and the batches are cut from its training corpus (data.train; --src/--tgt for
another one) as heed's trainer cuts them: real ids, real lengths, token-bucketed to batch_tokens.
On the same batches it times:

1. matmuls     the step's matrix products alone, forward and backward (each Linear's three GEMMs,
               the attention's score and weighted-sum batched products with theirs), nothing
               else: no softmax, norm, dropout, embedding, loss or optimizer. No implementation of
               this model can do less arithmetic, so none can beat this time.
2. bare step   the same Transformer in bare PyTorch: torch.nn.Transformer (pre- or post-norm as the
               config says, batch_first, its fused attention fast paths), scaled embeddings with
               sinusoidal positions, a tied output layer, label-smoothed cross-entropy, then
               zero_grad + clip + Adam. The whole update with no toolkit around it: the floor a
               toolkit's trainer step is read against.
3. heed step   heed's TransformerSeq2Seq from the same config (heed.nn.build), its loss, backward,
               clip and Adam, outside heed's trainer (no data loading, logging or evaluation).
4. heed trainer  the trainer's own step, from the run's training tokens/s (metrics.jsonl, the
               mean of its logged windows; --heed-tok-per-s to give one).

Each is printed in ms per step, target tokens/s and as a multiple of the bare step (the issue's
target: heed's trainer step <= 1.3x the bare step). On CUDA the peak GPU memory of each is printed
too. Means over --steps timed steps after --warmup steps, cycling over the batches.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

PAD = 0


# ----------------------------------------------------------------------------------- batches


def load_run(run: Path) -> tuple[Any, Any, Path]:
    """(config, codec, model directory) of a heed training output or model directory."""
    from heed.checkpoint import find_model_dir
    from heed.config import load_config
    from heed.data.codec import Codec

    directory = find_model_dir(run)
    config = load_config(directory / "config.yaml", environment=False)
    return config, Codec.load(directory, data=config.data), directory


def corpus_batches(config: Any, codec: Any, src: Path, tgt: Path, *, n_batches: int, seed: int) -> list[Any]:
    """`n_batches` training batches of real sentences, cut as heed's trainer cuts them."""
    from heed.data.batching import collate, plan_batches
    from heed.data.corpus import read_parallel

    examples = [e for e in codec.encode_pairs(list(read_parallel(src, tgt)))
                if len(e[0]) <= config.data.max_src_len and len(e[1]) <= config.data.max_tgt_len]
    groups = plan_batches([len(s) for s, _ in examples], [len(t) for _, t in examples],
                          batch_tokens=config.data.batch_tokens, max_sentences=config.data.max_sentences,
                          shuffle=True, rng=random.Random(seed))
    return [collate([examples[i] for i in g.tolist()], g.tolist()) for g in groups[:n_batches]]


# ------------------------------------------------------------------------------------ models


def sinusoids(length: int, d_model: int) -> Tensor:
    """(length, d_model) sinusoidal positions (Vaswani et al. 2017, section 3.5)."""
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    rates = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model)
    table[:, 0::2], table[:, 1::2] = torch.sin(position * rates), torch.cos(position * rates)
    return table


class BareTransformer(nn.Module):
    """The model in bare PyTorch around torch.nn.Transformer, for the floor's bare step."""

    def __init__(self, cfg: Any, src_vocab: int, tgt_vocab: int, label_smoothing: float) -> None:
        super().__init__()
        self.d_model, self.label_smoothing = cfg.d_model, label_smoothing
        self.src_embed = nn.Embedding(src_vocab, cfg.d_model, padding_idx=PAD)
        self.tgt_embed = nn.Embedding(tgt_vocab, cfg.d_model, padding_idx=PAD)
        self.register_buffer("positions", sinusoids(cfg.max_positions, cfg.d_model), persistent=False)
        self.dropout = nn.Dropout(cfg.dropout)
        with warnings.catch_warnings():  # "enable_nested_tensor is True, but ...": pre-norm has no nested path
            warnings.simplefilter("ignore", UserWarning)
            self.transformer = nn.Transformer(cfg.d_model, cfg.heads, cfg.layers, cfg.layers, cfg.ff_size,
                                              cfg.dropout, batch_first=True, norm_first=cfg.norm == "pre")
        self.out = nn.Linear(cfg.d_model, tgt_vocab)
        if cfg.tie_embeddings:
            self.out.weight = self.tgt_embed.weight

    def embed(self, table: nn.Embedding, tokens: Tensor) -> Tensor:
        return self.dropout(table(tokens) * math.sqrt(self.d_model) + self.positions[: tokens.size(1)])

    def loss(self, b: Any) -> Tensor:
        from heed.nn.transformer.attention import sdpa_backends, sdpa_kernel

        backends = sdpa_backends(b.src)  # the backends heed's fused path allows (on CUDA no cuDNN graph per shape)
        if backends is None:
            return self._loss(b)
        with sdpa_kernel(backends):
            return self._loss(b)

    def _loss(self, b: Any) -> Tensor:
        T = b.tgt_in.size(1)
        causal = torch.ones(T, T, dtype=torch.bool, device=b.src.device).triu(1)  # (tgt_len, tgt_len) True = masked
        src_pad = b.src == PAD  # (batch, src_len)
        states = self.transformer(self.embed(self.src_embed, b.src), self.embed(self.tgt_embed, b.tgt_in),
                                  tgt_mask=causal, src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad,
                                  tgt_key_padding_mask=b.tgt_in == PAD)  # (batch, tgt_len, d_model)
        logits = self.out(states).float()  # (batch, tgt_len, vocab)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), b.tgt_out.reshape(-1), ignore_index=PAD,
                               label_smoothing=self.label_smoothing, reduction="sum") / b.num_tgt_tokens


class HeedTransformer(nn.Module):
    """heed's model for the same config, with the loss heed's trainer takes (its sum / tokens)."""

    def __init__(self, cfg: Any, src_vocab: int, tgt_vocab: int, label_smoothing: float) -> None:
        super().__init__()
        from heed.nn.build import build_model

        self.model = build_model(cfg, src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab)
        self.label_smoothing = label_smoothing

    def loss(self, b: Any) -> Tensor:
        return self.model.loss(b, label_smoothing=self.label_smoothing).total / b.num_tgt_tokens


class MatmulsOnly:
    """The step's matrix products alone, forward and backward, on tensors made once per shape."""

    def __init__(self, cfg: Any, tgt_vocab: int, device: torch.device, dtype: torch.dtype) -> None:
        self.cfg, self.vocab, self.device, self.dtype = cfg, tgt_vocab, device, dtype
        self._tensors: dict[tuple[int, ...], Tensor] = {}

    def prepare(self, batches: list[Any]) -> MatmulsOnly:
        """Make every batch's operands now, so the timed steps do products and nothing else."""
        for b in batches:
            self.loss(b)
        return self

    def _t(self, *shape: int) -> Tensor:
        if shape not in self._tensors:
            self._tensors[shape] = torch.randn(*shape, device=self.device, dtype=self.dtype)
        return self._tensors[shape]

    def _linear(self, n: int, d_in: int, d_out: int) -> None:
        x, w, g = self._t(n, d_in), self._t(d_in, d_out), self._t(n, d_out)
        x @ w  # forward
        g @ w.T  # grad of the input
        x.T @ g  # grad of the weight

    def _attention(self, rows: int, q_len: int, k_len: int) -> None:
        d_k = self.cfg.d_model // self.cfg.heads
        q, k, p = self._t(rows, q_len, d_k), self._t(rows, k_len, d_k), self._t(rows, q_len, k_len)
        torch.bmm(q, k.transpose(1, 2))  # scores; backward: two more of this size
        torch.bmm(p, k)
        torch.bmm(p.transpose(1, 2), q)
        torch.bmm(p, k)  # weighted sum; backward: two more
        torch.bmm(p, k)
        torch.bmm(p.transpose(1, 2), q)

    def loss(self, b: Any) -> Tensor:
        cfg = self.cfg
        batch, S, T = b.src.size(0), b.src.size(1), b.tgt_in.size(1)
        d, f, rows = cfg.d_model, cfg.ff_size, b.src.size(0) * cfg.heads
        for _ in range(cfg.layers):  # encoder: self-attention and feed-forward
            self._linear(batch * S, d, 3 * d)
            self._attention(rows, S, S)
            self._linear(batch * S, d, d)
            self._linear(batch * S, d, f)
            self._linear(batch * S, f, d)
        for _ in range(cfg.layers):  # decoder: self-attention, cross-attention, feed-forward
            self._linear(batch * T, d, 3 * d)
            self._attention(rows, T, T)
            self._linear(batch * T, d, d)
            self._linear(batch * T, d, d)  # cross-attention query
            self._linear(batch * S, d, 2 * d)  # its keys and values
            self._attention(rows, T, S)
            self._linear(batch * T, d, d)
            self._linear(batch * T, d, f)
            self._linear(batch * T, f, d)
        self._linear(int(b.num_tgt_tokens), d, self.vocab)  # the output layer on the real tokens
        return self._t(1)


# ------------------------------------------------------------------------------------ timing


def time_steps(model: Any, batches: list[Any], *, steps: int, warmup: int, device: torch.device, bf16: bool,
               update: bool) -> tuple[float, int | None]:
    """Mean seconds of one step and the peak CUDA memory (bytes; None on the CPU)."""
    params = list(model.parameters()) if update else []
    optimizer = torch.optim.Adam(params, lr=1e-4) if update else None
    if isinstance(model, nn.Module):
        model.train()
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
    sync: Callable[[], None] = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for k in range(warmup + steps):
        b = batches[k % len(batches)]
        sync()
        start = time.perf_counter()
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = model.loss(b)
        if optimizer is not None:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
        sync()
        if k >= warmup:
            times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    return statistics.mean(times), peak


def trainer_tok_per_s(run: Path) -> float | None:
    """Mean `tok_per_s` of the training windows logged in RUN/metrics.jsonl, if there is one."""
    path = run / "metrics.jsonl"
    if not path.is_file():
        return None
    rates = [r["tok_per_s"] for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())
             if r.get("kind") == "train" and "tok_per_s" in r]
    return statistics.mean(rates) if rates else None


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="a heed Transformer's training output or model directory")
    p.add_argument("--src", type=Path, help="training sources (default: the run's data.train.src)")
    p.add_argument("--tgt", type=Path, help="training targets (default: the run's data.train.tgt)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--bf16", action="store_true", help="bf16 autocast, float32 weights, as heed's train.bf16")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--steps", type=int, default=40, help="timed steps per measurement")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--heed-tok-per-s", type=float, help="heed's trainer target tokens/s (default: RUN/metrics.jsonl)")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    config, codec, model_dir = load_run(args.run)
    cfg = config.model
    if cfg.family != "transformer":
        sys.exit(f"{model_dir}: model.family is {cfg.family}, not transformer (bench/floor.py measures the RNN)")
    train = config.data.train
    src = args.src or (train.src if train is not None else None)
    tgt = args.tgt or (train.tgt if train is not None else None)
    if src is None or tgt is None or not Path(src).is_file() or not Path(tgt).is_file():
        sys.exit(f"{model_dir}: its training corpus ({src}, {tgt}) is not here; give it with --src FILE --tgt FILE")
    batches = [b.to(device) for b in corpus_batches(config, codec, Path(src), Path(tgt), n_batches=args.warmup + args.steps,
                                                     seed=args.seed)]
    tokens = statistics.mean(b.num_tgt_tokens for b in batches[args.warmup:])
    sizes = dict(src_vocab=len(codec.src_vocab), tgt_vocab=len(codec.tgt_vocab), label_smoothing=config.train.label_smoothing)
    dtype = torch.bfloat16 if args.bf16 else torch.float32

    def measure(model: Any, update: bool = True) -> tuple[float, int | None]:
        return time_steps(model.to(device) if isinstance(model, nn.Module) else model, batches, steps=args.steps,
                          warmup=args.warmup, device=device, bf16=args.bf16, update=update)

    heed_model = HeedTransformer(cfg, sizes["src_vocab"], sizes["tgt_vocab"], sizes["label_smoothing"])
    bare_model = BareTransformer(cfg, sizes["src_vocab"], sizes["tgt_vocab"], sizes["label_smoothing"])
    n_heed = sum(p.numel() for p in heed_model.parameters())
    n_bare = sum(p.numel() for p in bare_model.parameters())
    rows: list[tuple[str, float, int | None]] = [
        ("matmuls alone, fwd+bwd", measure(MatmulsOnly(cfg, sizes["tgt_vocab"], device, dtype).prepare(batches), update=False)[0], None),
        ("bare step (torch.nn.Transformer) + Adam", *measure(bare_model)),
        ("heed step (heed.nn, outside trainer) + Adam", *measure(heed_model)),
    ]
    trainer = args.heed_tok_per_s or trainer_tok_per_s(args.run)
    if trainer:
        rows.append(("heed trainer step (from its tok/s)", tokens / trainer, None))

    bare = rows[1][1]
    name = torch.cuda.get_device_name() if device.type == "cuda" else f"{torch.get_num_threads()} thread(s)"
    print(f"Transformer step floor on {args.device} ({name}), {'bf16 autocast' if args.bf16 else 'float32'}: "
          f"{cfg.layers}+{cfg.layers} layers x {cfg.d_model}, {cfg.heads} heads, ff {cfg.ff_size}, {cfg.norm}-norm; "
          f"parameters heed {n_heed:,}, bare {n_bare:,}; batches of {config.data.batch_tokens} tokens from "
          f"{src}, {tokens:.0f} target tokens a step; means of {args.steps} steps")
    result: dict[str, Any] = {"device": args.device, "device_name": name, "bf16": args.bf16, "threads": args.threads,
                              "parameters": {"heed": n_heed, "bare": n_bare}, "tokens_per_step": tokens, "rows": {}}
    for label, seconds, peak in rows:
        memory = f"  peak {peak / 2**20:7.0f} MiB" if peak is not None else ""
        print(f"  {label:<46} {seconds * 1e3:8.2f} ms  {tokens / seconds:11,.0f} tok/s  {seconds / bare:5.2f}x bare{memory}")
        result["rows"][label] = {"seconds": seconds, "tok_per_s": tokens / seconds, "x_bare": seconds / bare,
                                 "peak_bytes": peak}
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
