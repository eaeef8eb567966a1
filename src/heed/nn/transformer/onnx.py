"""The Transformer family's ONNX graphs (heed.export writes them, heed.export.ort runs them):

    encoder  src (batch, src_len) int64, src_lengths (batch,) int64 ->
             memory_keys.L, memory_values.L (batch, heads, src_len, d_k) for each decoder layer L:
             the cross-attention's keys and values, once per sentence
    step     prev_tokens (rows,) int64, src_mask bool (batch, src_len), the memory tensors, and the
             key/value cache self_keys.L, self_values.L (rows, heads, steps, d_k) ->
             logits (rows, vocab), the cache one step longer (self_keys.L_out, ...), attention
             (rows, src_len): the alignment layer's cross-attention, mean over heads

rows = batch * group: a source's beams are consecutive rows and read its memory in one grouped
product (heed.nn.transformer.layers.grouped_attend), so beams never copy the source. The cache's
steps axis is dynamic and starts at 0; the step's position is its length.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from heed.nn.masks import lengths_to_mask
from heed.nn.protocol import TensorState
from heed.nn.transformer.config import TransformerConfig
from heed.nn.transformer.model import TransformerEncoded, TransformerSeq2Seq, cache_names, cache_state, empty_cache


def memory_names(layers: int) -> list[str]:
    return [f"{kind}.{layer}" for layer in range(layers) for kind in ("memory_keys", "memory_values")]


class EncoderGraph(nn.Module):
    def __init__(self, model: TransformerSeq2Seq) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: Tensor, src_lengths: Tensor) -> tuple[Tensor, ...]:
        enc = self.model.encode(src, src_lengths)
        return tuple(t for pair in enc.memory for t in pair)


class StepGraph(nn.Module):
    def __init__(self, model: TransformerSeq2Seq) -> None:
        super().__init__()
        self.model = model
        self.layers = model.layers

    def forward(self, prev_tokens: Tensor, src_mask: Tensor, *tensors: Tensor) -> tuple[Tensor, ...]:
        n = 2 * self.layers
        memory = tuple((tensors[2 * i], tensors[2 * i + 1]) for i in range(self.layers))
        names = cache_names(self.layers)
        state = cache_state(dict(zip(names, tensors[n:])))
        out = self.model.step(prev_tokens, state, TransformerEncoded(src_mask, memory))
        return (out.logits, *(out.state[name] for name in names), out.attention)


class TransformerGraphs:
    """The Transformer family's export contract for one model config (see heed.export.ort.OrtModel)."""

    has_attention = True

    def __init__(self, cfg: TransformerConfig) -> None:
        self.layers = cfg.layers
        self.heads = cfg.heads
        self.d_k = cfg.d_model // cfg.heads

    def names(self) -> dict[str, tuple[list[str], list[str]]]:
        memory, cache = memory_names(self.layers), cache_names(self.layers)
        return {"encoder": (["src", "src_lengths"], memory),
                "step": (["prev_tokens", "src_mask", *memory, *cache],
                         ["logits", *(f"{name}_out" for name in cache), "attention"])}

    def modules(self, model: TransformerSeq2Seq) -> dict[str, tuple[nn.Module, tuple[Tensor, ...],
                                                                     dict[str, dict[int, str]]]]:
        """{role: (module to trace, example inputs, dynamic axes by name)}: traced with 2 sources of
        2 rows each (the grouped path), 5 source positions and 3 cached steps, sizes that differ so
        the tracer cannot mistake one dimension for another."""
        memory, cache = memory_names(self.layers), cache_names(self.layers)
        src = torch.full((2, 5), 3, dtype=torch.long)
        lengths = torch.tensor([5, 3])
        with torch.no_grad():
            enc = model.encode(src, lengths)
        gen = torch.Generator().manual_seed(0)  # a private generator: exporting leaves the global RNG as it was
        cached = [torch.randn(4, self.heads, 3, self.d_k, generator=gen) for _ in cache]
        step_inputs = (torch.full((4,), model.bos_id, dtype=torch.long), lengths_to_mask(lengths, 5),
                       *(t for pair in enc.memory for t in pair), *cached)
        encoder_axes = {"src": {0: "batch", 1: "src_len"}, "src_lengths": {0: "batch"},
                        **{name: {0: "batch", 2: "src_len"} for name in memory}}
        step_axes = {"prev_tokens": {0: "rows"}, "src_mask": {0: "batch", 1: "src_len"},
                     "logits": {0: "rows"}, "attention": {0: "rows", 1: "src_len"},
                     **{name: {0: "batch", 2: "src_len"} for name in memory},
                     **{name: {0: "rows", 2: "steps"} for name in cache},
                     **{f"{name}_out": {0: "rows", 2: "next_steps"} for name in cache}}
        return {"encoder": (EncoderGraph(model), (src, lengths), encoder_axes),
                "step": (StepGraph(model), step_inputs, step_axes)}

    # ------------------------------------------------------------------ the runtime's side

    def check_source(self, src: Tensor) -> None:
        """Any source length: sinusoidal positions have no table, learned ones read their last row."""

    def encoded(self, named: dict[str, Tensor], src: Tensor, src_lengths: Tensor) -> TransformerEncoded:
        memory = tuple((named[f"memory_keys.{i}"], named[f"memory_values.{i}"]) for i in range(self.layers))
        return TransformerEncoded(lengths_to_mask(src_lengths, src.size(1)), memory, src=src)

    def init_state(self, enc: TransformerEncoded) -> TensorState:
        return empty_cache(self.layers, enc.mask.size(0) * enc.group, self.heads, self.d_k,
                           like=enc.memory[0][0])

    def source_feeds(self, enc: TransformerEncoded) -> dict[str, Tensor]:
        feeds = {"src_mask": enc.mask}
        for i, (keys, values) in enumerate(enc.memory):
            feeds[f"memory_keys.{i}"], feeds[f"memory_values.{i}"] = keys, values
        return feeds

