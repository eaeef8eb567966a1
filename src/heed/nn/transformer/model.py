"""An encoder-decoder Transformer (Vaswani et al. 2017) behind heed's model contract
(heed.nn.protocol): the same search, training loop, ensembles, server and explorer as the RNNs.

    encode     src (batch, src_len) -> TransformerEncoded: the source mask and, for every
               decoder layer, the cross-attention's keys and values, projected once per sentence
    init_state an empty key/value cache per decoder layer (TensorState, batch axis 0; a step
               concatenates to it: written in place into buffers allocated once per search it was
               slower on the CPU, bench/RESULTS.md "The in-place key/value cache")
    step       one target token per row: its self-attention keys and values join the cache, the
               query attends over the cache and over the source (each source's beams read its keys
               in one grouped product; nothing is copied per beam)
    __call__   the teacher-forced pass over a whole target with a causal mask: the same numbers

The attention a step reports (heatmaps, alignments, <unk> replacement, the coverage penalty) is
the cross-attention of the last decoder layer, averaged over its heads (`alignment_layer`);
`attention_maps` gives every head of every layer.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from heed.nn.int8 import Int8Linear, quantize_linears
from heed.nn.layout import column_major, for_decoding
from heed.nn.loss import SeqLoss, TargetBatch, generator_loss
from heed.nn.masks import lengths_to_mask
from heed.nn.protocol import (
    AttentionBlock,
    AttentionMaps,
    MeasuredReading,
    Seq2SeqOutput,
    TensorState,
)
from heed.nn.transformer.attention import MultiHeadAttention
from heed.nn.transformer.config import TransformerConfig
from heed.nn.transformer.layers import (
    Activation,
    DecoderLayer,
    EncoderLayer,
    NormPlace,
    PositionKind,
    SinusoidLayout,
    Visit,
    make_positions,
)
from heed.plumbing.runtime import compile_function


@dataclass(frozen=True)
class TransformerEncoded:
    """A batch of sources, encoded.

    mask:   bool (batch, src_len), True = real token
    memory: per decoder layer, the cross-attention's keys and values, each (batch, heads, src_len, d_k)
    group:  decoder rows per source (beams, after `repeat`); row r belongs to source r // group
    src:    long (batch, src_len) the source ids
    """

    mask: Tensor
    memory: tuple[tuple[Tensor, Tensor], ...]
    group: int = 1
    src: Tensor | None = None

    def repeat(self, times: int) -> TransformerEncoded:
        """Each source serving `times` decoder rows: nothing is copied, the grouped attention reads
        one copy per source for all its rows."""
        return replace(self, group=self.group * times)

    def select(self, sources: Tensor) -> TransformerEncoded:
        """Sources `sources` (n,) long, with all their decoder rows."""
        return TransformerEncoded(
            mask=self.mask.index_select(0, sources),
            memory=tuple((k.index_select(0, sources), v.index_select(0, sources)) for k, v in self.memory),
            group=self.group, src=None if self.src is None else self.src.index_select(0, sources))

    @property
    def memory_mask(self) -> Tensor:
        """bool (batch, 1, 1, src_len): broadcasts over heads and queries."""
        return self.mask[:, None, None, :]


Report = tuple[int, tuple[int, ...] | None]  # a step's reported attention: (decoder layer, its heads averaged; None: all)


class TransformerStep(NamedTuple):
    logits: Tensor  # (rows, vocab)
    state: TensorState  # the key/value cache, one step longer
    attention: Tensor  # (rows, src_len) the alignment layer's cross-attention, mean over heads


class TransformerStepFeatures(NamedTuple):
    """`step` up to the output layer (heed.nn.protocol.StepFeatures)."""

    features: Tensor  # (rows, d_model) after the final norm
    state: TensorState  # the key/value cache, one step longer
    attention: Tensor  # (rows, src_len) the alignment layer's cross-attention, mean over heads


class TransformerFeatures(NamedTuple):
    features: Tensor  # (batch, tgt_len, d_model) the generator's input
    attention: Tensor | None  # (batch, tgt_len, src_len) when asked for
    layer_heads: Tensor | None = None  # (batch, heads, tgt_len, src_len): one layer's every head, when asked for


def cache_names(layers: int) -> list[str]:
    """The state's tensor names: each decoder layer's self-attention keys and values so far."""
    return [f"{kind}.{layer}" for layer in range(layers) for kind in ("self_keys", "self_values")]


def cache_state(tensors: Mapping[str, Tensor]) -> TensorState:
    """The decoder state: the caches by name, every one with its rows on axis 0."""
    return TensorState(dict(tensors), {name: 0 for name in tensors})


def empty_cache(layers: int, rows: int, heads: int, d_k: int, *, like: Tensor) -> TensorState:
    """The first state: every cache (rows, heads, 0, d_k), of `like`'s dtype and device."""
    empty = like.new_zeros(rows, heads, 0, d_k)
    return cache_state({name: empty for name in cache_names(layers)})


class TiedGenerator(nn.Module):
    """logits = x E^T + b with E the target embedding (Press & Wolf 2017): the weight is the
    embedding's own parameter, not registered twice (a model file stores each tensor once)."""

    def __init__(self, embedding: nn.Embedding) -> None:
        super().__init__()
        self._embedding = [embedding]  # a list: not a submodule, so its weight is not saved twice
        self.out_features = embedding.num_embeddings
        self.bias = nn.Parameter(torch.zeros(embedding.num_embeddings))

    @property
    def weight(self) -> Tensor:
        return self._embedding[0].weight

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)


class _Embed(nn.Module):
    """Token embedding times sqrt(d_model) (or 1 without `scale`), plus positions, then dropout
    (Vaswani et al. 2017, 3.4-3.5)."""

    def __init__(self, vocab_size: int, d_model: int, *, pad_id: int, positions: PositionKind,
                 max_positions: int, dropout: float, scale: bool = True,
                 sinusoid_layout: SinusoidLayout = "interleaved") -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        nn.init.normal_(self.tokens.weight, std=d_model ** -0.5)  # as fairseq: the scale then makes them ~1
        with torch.no_grad():
            self.tokens.weight[pad_id].zero_()
        self.positions = make_positions(positions, d_model, max_positions, sinusoid_layout)
        self.scale = math.sqrt(d_model) if scale else 1.0
        self.dropout = nn.Dropout(dropout)
        self._shared: list[nn.Embedding] = []  # a list, not a submodule: a shared table is saved by its owner

    def read_from(self, table: nn.Embedding) -> None:
        """Look tokens up in `table` (the other stack's embedding) from now on instead of an own
        table: one table for both sides (model.share_embeddings), stored once in a model file."""
        del self.tokens
        self._shared = [table]

    def table(self) -> nn.Embedding:
        return self._shared[0] if self._shared else self.tokens

    def forward(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """tokens (batch, len) long, positions (len,) or (batch, len) long -> (batch, len, d_model)."""
        table = self.table()
        x = table(tokens) * self.scale + self.positions(positions).to(table.weight.dtype)
        return self.dropout(x)


class _Stack(nn.Module):
    """What both stacks share: the embedding with positions, `layers` layers of `layer_class`, and
    (pre-norm leaves the last sum unnormalised) one LayerNorm after the stack (Wang et al. 2019)."""

    def __init__(self, layer_class: type[EncoderLayer | DecoderLayer], *, vocab_size: int, d_model: int,
                 heads: int, layers: int, ff_size: int, dropout: float, attention_dropout: float, norm: NormPlace,
                 positions: PositionKind, max_positions: int, pad_id: int, activation: Activation = "relu",
                 scale_embeddings: bool = True, sinusoid_layout: SinusoidLayout = "interleaved") -> None:
        super().__init__()
        self.embed = _Embed(vocab_size, d_model, pad_id=pad_id, positions=positions, max_positions=max_positions,
                            dropout=dropout, scale=scale_embeddings, sinusoid_layout=sinusoid_layout)
        self.layers = nn.ModuleList(layer_class(d_model, heads, ff_size, dropout=dropout,
                                                attention_dropout=attention_dropout, norm=norm, activation=activation)
                                    for _ in range(layers))
        self.norm = nn.LayerNorm(d_model) if norm == "pre" else nn.Identity()


class TransformerEncoder(_Stack):
    def __init__(self, **sizes: Any) -> None:
        super().__init__(EncoderLayer, **sizes)

    def forward(self, src: Tensor, mask: Tensor, *, weights: list[Tensor] | None = None,
                visit: Visit | None = None) -> Tensor:
        """src (batch, src_len), mask bool (batch, src_len) -> states (batch, src_len, d_model), zero
        under padding; with `weights` (a list) each layer's (batch, heads, src_len, src_len) is appended;
        `visit` is shown each layer's self-attention as an AttentionBlock."""
        x = self.embed(src, torch.arange(src.size(1), device=src.device))
        key_mask = mask[:, None, None, :]  # (batch, 1, 1, src_len)
        for i, layer in enumerate(self.layers):
            x, w = layer(x, key_mask, need_weights=weights is not None, visit=_numbered(visit, i))
            if weights is not None:
                weights.append(w)
        return self.norm(x).masked_fill(~mask.unsqueeze(-1), 0.0)


def _numbered(visit: Visit | None, layer: int) -> Visit | None:
    """`visit` with the blocks of layer `layer` numbered so."""
    return None if visit is None else (lambda block: visit(block._replace(layer=layer)))


class TransformerDecoder(_Stack):
    """The decoder stack and its generator (tied to the target embedding with `tie_embeddings`);
    TransformerSeq2Seq runs it step by step or over a whole target."""

    def __init__(self, *, tie_embeddings: bool, **sizes: Any) -> None:
        super().__init__(DecoderLayer, **sizes)
        vocab_size, d_model = self.embed.tokens.num_embeddings, self.embed.tokens.embedding_dim
        self.generator: nn.Module = TiedGenerator(self.embed.tokens) if tie_embeddings else nn.Linear(d_model,
                                                                                                        vocab_size)


def _cross_attention(layer: nn.Module) -> MultiHeadAttention:
    """A decoder layer's attention over the source (nn.ModuleList gives its items as bare Modules)."""
    assert isinstance(layer, DecoderLayer)
    return layer.cross_attn


class TransformerSeq2Seq(nn.Module):
    """Encoder + decoder + generator; the family "transformer" of heed.nn.build."""

    family = "transformer"
    has_attention = True

    def __init__(self, encoder: TransformerEncoder, decoder: TransformerDecoder, *, pad_id: int = 0, bos_id: int = 1,
                 eos_id: int = 2, unk_id: int = 3) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = pad_id, bos_id, eos_id, unk_id
        self.alignment_layer = len(decoder.layers) - 1  # whose cross-attention a step reports
        self._compiled_features: Callable[..., TransformerFeatures] | None = None

    @property
    def layers(self) -> int:
        return len(self.decoder.layers)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @property
    def measured_reading(self) -> MeasuredReading:
        """The reading measured best on the dates task's gold (docs/look-inside.md, section 8): value
        norms, argmax; a pre-norm stack's second-to-last layer (Garg et al. 2019 align there too), a
        post-norm stack's mean of all layers. The last layer's plain heads' mean aligned 2 to 9 times
        worse there."""
        if self.decoder.layers[0].pre:
            return MeasuredReading("a pre-norm Transformer", "argmax", max(self.layers - 2, 0), "value_norm")
        return MeasuredReading("a post-norm Transformer", "argmax", "mean", "value_norm")

    @property
    def head_grid(self) -> tuple[int, int]:
        """(decoder layers, heads per layer) of attention_heads (heed.nn.protocol.HeadsModel)."""
        return len(self.decoder.layers), _cross_attention(self.decoder.layers[0]).heads

    # ------------------------------------------------------------------ search

    def encode(self, src: Tensor, src_lengths: Tensor, *, weights: list[Tensor] | None = None,
               visit: Visit | None = None) -> TransformerEncoded:
        """src (batch, src_len), src_lengths (batch,) -> the source mask and every decoder
        layer's cross-attention keys and values, once per sentence; with `weights` (a list) each
        encoder layer's self-attention (batch, heads, src_len, src_len) is appended; `visit` is
        shown each encoder layer's self-attention (heed.nn.protocol.AttentionBlock)."""
        mask = lengths_to_mask(src_lengths, src.size(1))
        states = self.encoder(src, mask, weights=weights, visit=visit)
        memory = tuple(_cross_attention(layer).project_memory(states) for layer in self.decoder.layers)
        return TransformerEncoded(mask, memory, src=src)

    def init_state(self, enc: TransformerEncoded) -> TensorState:
        """Empty caches, each (rows, heads, 0, d_k), rows = batch * group."""
        keys = enc.memory[0][0]  # (batch, heads, src_len, d_k)
        return empty_cache(self.layers, enc.mask.size(0) * enc.group, keys.size(1), keys.size(3), like=keys)

    def step(self, prev_tokens: Tensor, state: TensorState, enc: TransformerEncoded, *,
             report: Report | None = None) -> TransformerStep:
        """prev_tokens (rows,) -> TransformerStep(logits (rows, vocab), the caches one step longer,
        attention (rows, src_len)): the alignment layer's heads averaged, or with `report` (layer,
        heads) that layer's cross-attention, those heads averaged (None: all of them)."""
        out = self.step_features(prev_tokens, state, enc, report=report)
        return TransformerStep(self.decoder.generator(out.features), out.state, out.attention)

    def step_features(self, prev_tokens: Tensor, state: TensorState, enc: TransformerEncoded, *,
                      report: Report | None = None) -> TransformerStepFeatures:
        """`step` up to the output layer: features (rows, d_model) after the final norm
        (heed.search.shortlist multiplies them by a shortlist's rows of the output layer)."""
        reported, heads = (self.alignment_layer, None) if report is None else report
        dec = self.decoder
        position = state["self_keys.0"].size(2)  # steps decoded so far
        positions = torch.full((1,), position, dtype=torch.long, device=prev_tokens.device)
        x = dec.embed(prev_tokens.unsqueeze(1), positions)  # (rows, 1, d_model)
        tensors: dict[str, Tensor] = {}
        attention: Tensor | None = None
        for i, layer in enumerate(dec.layers):
            keys, values = f"self_keys.{i}", f"self_values.{i}"
            out = layer(x, enc.memory[i], enc.memory_mask, cache=(state[keys], state[values]),
                        need_weights=i == reported)
            x = out.states
            tensors[keys], tensors[values] = out.cache
            if out.cross_weights is not None:  # (rows, heads, 1, src_len) -> (rows, src_len)
                weights = out.cross_weights if heads is None else out.cross_weights[:, list(heads)]
                attention = weights.mean(1).squeeze(1)
        assert attention is not None
        return TransformerStepFeatures(dec.norm(x).squeeze(1), cache_state(tensors), attention)

    def output_rows(self, ids: Tensor) -> Callable[[Tensor], Tensor]:
        """The output layer restricted to its rows `ids` (n,) long, gathered once: features
        (rows, d_model) -> logits (rows, n) (heed.search.shortlist). An int8 model's (to_int8)
        keeps its int8 rows and their scales."""
        generator = self.decoder.generator
        if isinstance(generator, Int8Linear):
            return generator.rows(ids)
        weight, bias = generator.weight, generator.bias
        assert isinstance(weight, Tensor) and (bias is None or isinstance(bias, Tensor))
        picked, picked_bias = weight.index_select(0, ids), None if bias is None else bias.index_select(0, ids)
        return lambda features: F.linear(features, picked, picked_bias)

    # ------------------------------------------------------------------ teacher forcing

    def _decode_all(self, tgt_in: Tensor, enc: TransformerEncoded, *, need_attention: bool,
                    weights: dict[str, list[Tensor]] | None = None, heads_of_layer: int | None = None,
                    visit: Visit | None = None, states: list[Tensor] | None = None) -> TransformerFeatures:
        """tgt_in (batch, tgt_len) -> features (batch, tgt_len, d_model) after the final norm, the
        alignment layer's head-mean cross-attention (batch, tgt_len, src_len) when asked for, and
        layer `heads_of_layer`'s every head (batch, heads, tgt_len, src_len) when one is named;
        `visit` is shown each layer's attention blocks, and `states` (a list) gets each layer's
        output stream (batch, tgt_len, d_model)."""
        dec = self.decoder
        x = dec.embed(tgt_in, torch.arange(tgt_in.size(1), device=tgt_in.device))
        attention = layer_heads = None
        for i, layer in enumerate(dec.layers):
            need = weights is not None or (need_attention and i == self.alignment_layer) or i == heads_of_layer
            out = layer(x, enc.memory[i], enc.memory_mask, need_weights=need, visit=_numbered(visit, i))
            x = out.states
            if states is not None:
                states.append(x)
            if weights is not None:
                weights["decoder"].append(out.self_weights)
                weights["cross"].append(out.cross_weights)
            if need_attention and i == self.alignment_layer:
                attention = out.cross_weights.mean(1)  # (batch, tgt_len, src_len)
            if i == heads_of_layer:
                layer_heads = out.cross_weights  # (batch, heads, tgt_len, src_len)
        return TransformerFeatures(dec.norm(x), attention, layer_heads)

    def forward_features(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, *,
                         need_attention: bool = False) -> TransformerFeatures:
        """The teacher-forced pass up to the generator's input; under torch.compile in training mode
        once `compile_teacher_forced` ran."""
        if self._compiled_features is not None and self.training and not need_attention:
            return self._compiled_features(src, src_lengths, tgt_in)
        return self._decode_all(tgt_in, self.encode(src, src_lengths), need_attention=need_attention)

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, *,
                need_attention: bool = True) -> Seq2SeqOutput:
        """Teacher-forced: src (batch, src_len), tgt_in (batch, tgt_len) starting with BOS ->
        logits (batch, tgt_len, vocab), attention (batch, tgt_len, src_len)."""
        features = self.forward_features(src, src_lengths, tgt_in, need_attention=need_attention)
        return Seq2SeqOutput(self.decoder.generator(features.features), features.attention)

    def attention_maps(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> AttentionMaps:
        """Every head of every layer of the teacher-forced pass (see AttentionMaps)."""
        enc_weights: list[Tensor] = []
        weights: dict[str, list[Tensor]] = {"decoder": [], "cross": []}
        self._decode_all(tgt_in, self.encode(src, src_lengths, weights=enc_weights), need_attention=False,
                         weights=weights)
        return AttentionMaps(torch.stack(enc_weights), torch.stack(weights["decoder"]), torch.stack(weights["cross"]))

    def token_embeddings(self) -> tuple[nn.Embedding, nn.Embedding]:
        """(source, target) embedding tables, before the sqrt(d_model) scale and the positions
        (heed.nn.protocol.AttributableModel); one module with share_embeddings."""
        return self.encoder.embed.table(), self.decoder.embed.table()

    def value_norms(self, src: Tensor, src_lengths: Tensor) -> Tensor:
        """||f_h(x_j)||, the norm of what source position j adds through head h of each decoder
        layer's cross-attention (MultiHeadAttention.head_outputs): (layers, heads, batch, src_len)."""
        memory = self.encode(src, src_lengths).memory
        norms = [_cross_attention(layer).head_outputs(v).norm(dim=-1)
                 for layer, (_, v) in zip(self.decoder.layers, memory)]
        return torch.stack(norms).transpose(1, 2)  # (layers, batch, heads, src_len) -> (layers, heads, batch, src_len)

    def value_weighted_heads(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        """attention_heads' weights, each times value_norms' norm of its source position (Kobayashi
        et al. 2020, eq. 6), from one encoding: (layers, heads, batch, tgt_len, src_len)."""
        enc = self.encode(src, src_lengths)
        norms = [_cross_attention(layer).head_outputs(v).norm(dim=-1) for layer, (_, v) in zip(self.decoder.layers, enc.memory)]
        weights: dict[str, list[Tensor]] = {"decoder": [], "cross": []}
        self._decode_all(tgt_in, enc, need_attention=False, weights=weights)
        heads = torch.stack(weights["cross"]).transpose(1, 2)  # (layers, heads, batch, tgt_len, src_len)
        return heads * torch.stack(norms).transpose(1, 2)[:, :, :, None, :]  # norms (layers, heads, batch, 1, src_len)

    def attention_heads(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        """Every decoder layer's cross-attention, head by head: (layers, heads, batch, tgt_len, src_len)."""
        weights: dict[str, list[Tensor]] = {"decoder": [], "cross": []}
        self._decode_all(tgt_in, self.encode(src, src_lengths), need_attention=False, weights=weights)
        return torch.stack(weights["cross"]).transpose(1, 2)

    def attention_blocks(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor,
                         visit: Callable[[AttentionBlock], None]) -> None:
        """Teacher-forced: `visit` every attention sublayer, encoder layers first, then each decoder
        layer's self- and cross-attention (heed.nn.protocol.ContributionModel)."""
        self._decode_all(tgt_in, self.encode(src, src_lengths, visit=visit), need_attention=False, visit=visit)

    def decoder_states(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced: the stream after each decoder layer, (layers, batch, tgt_len, d_model)."""
        states: list[Tensor] = []
        self._decode_all(tgt_in, self.encode(src, src_lengths), need_attention=False, states=states)
        return torch.stack(states)

    def read_out(self, states: Tensor) -> Tensor:
        """(..., d_model) -> (..., vocab): the final norm (pre-norm; post-norm layers end normalised)
        and the output layer, as the last layer's stream is read."""
        return self.decoder.generator(self.decoder.norm(states))

    def loss(self, batch: TargetBatch, *, label_smoothing: float = 0.0, attention_layer: int | None = None) -> SeqLoss:
        """The label-smoothed cross-entropy summed over the real target tokens (heed.nn.loss); with
        `attention_layer`, that decoder layer's every head's cross-attention of the same pass too
        (SeqLoss.attention, for guided alignment training; the eager pass, not the compiled one)."""
        if attention_layer is None:
            features = self.forward_features(batch.src, batch.src_lengths, batch.tgt_in)
        else:
            if not 0 <= attention_layer < self.layers:
                raise ValueError(f"attention_layer {attention_layer}: the decoder has layers 0..{self.layers - 1}")
            features = self._decode_all(batch.tgt_in, self.encode(batch.src, batch.src_lengths), need_attention=False,
                                        heads_of_layer=attention_layer)
        cross_entropy = generator_loss(features.features, self.decoder.generator, batch.tgt_out,  # type: ignore[arg-type]
                                       ignore_index=self.pad_id, label_smoothing=label_smoothing)
        return SeqLoss(cross_entropy, cross_entropy, None, features.layer_heads)

    def compile_teacher_forced(self) -> None:
        """From now on the training pass (encoder and decoder stacks, forward and backward) runs
        under torch.compile with dynamic batch and lengths: no step loop, so one graph serves
        every batch."""
        def features(src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> TransformerFeatures:
            return self._decode_all(tgt_in, self.encode(src, src_lengths), need_attention=False)

        self._compiled_features = compile_function(features)

    def for_decoding(self) -> None:
        """The decoder's Linear weights column-major for the step's few rows (heed.nn.layout), and
        a tied output layer's too: its weight is the target embedding (looked up row by row, where
        the layout costs little), and the output layer is a step's largest product (one thread, 5
        rows x 1,024 by 53,017 entries: 91.5 ms row-major, 32.3 ms column-major)."""
        for_decoding(self.decoder)
        generator = self.decoder.generator
        if isinstance(generator, TiedGenerator):
            table = generator.weight
            table.data = column_major(table.data)

    def to_int8(self, *, reduce_range: bool) -> None:
        """Every matrix product of encoder and decoder in dynamic int8 from now on (heed.nn.int8):
        the attention projections (MultiHeadAttention.to_int8), the feed-forward layers and the
        output layer, the tied one included (its weight stays the embedding table, looked up in
        float32). LayerNorms, embeddings, the attention's own products (scores, weighted sums) and
        the softmax stay float32. For decoding: the model is not trained afterwards."""
        for module in self.modules():
            if isinstance(module, MultiHeadAttention):
                module.to_int8(reduce_range=reduce_range)
        quantize_linears(self, reduce_range=reduce_range)
        generator = self.decoder.generator
        if isinstance(generator, TiedGenerator):
            self.decoder.generator = Int8Linear(generator.weight, generator.bias, reduce_range=reduce_range)


def build_transformer(cfg: TransformerConfig, *, src_vocab_size: int, tgt_vocab_size: int, pad_id: int = 0,
                      bos_id: int = 1, eos_id: int = 2, unk_id: int = 3,
                      source_to_target: Sequence[int] | None = None) -> TransformerSeq2Seq:
    """The family's builder (heed.nn.transformer.family): a fresh model for a `family: transformer`
    config. `source_to_target` serves the RNN's copy attention, which the config refuses for a
    Transformer. With `share_embeddings` the encoder reads the decoder's embedding (and with
    `tie_embeddings` the output layer too: one table, three uses)."""
    common = dict(d_model=cfg.d_model, heads=cfg.heads, layers=cfg.layers, ff_size=cfg.ff_size, dropout=cfg.dropout,
                  attention_dropout=cfg.attention_dropout, norm=cfg.norm, positions=cfg.positions,
                  max_positions=cfg.max_positions, pad_id=pad_id, activation=cfg.activation,
                  scale_embeddings=cfg.scale_embeddings, sinusoid_layout=cfg.sinusoid_layout)
    encoder = TransformerEncoder(vocab_size=src_vocab_size, **common)
    decoder = TransformerDecoder(vocab_size=tgt_vocab_size, tie_embeddings=cfg.tie_embeddings, **common)
    if cfg.share_embeddings:
        if src_vocab_size != tgt_vocab_size:
            raise ValueError(f"model.share_embeddings needs one vocabulary for both sides (data.shared_vocab), but "
                             f"the source has {src_vocab_size} ids and the target {tgt_vocab_size}")
        encoder.embed.read_from(decoder.embed.tokens)
    return TransformerSeq2Seq(encoder, decoder, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id, unk_id=unk_id)
