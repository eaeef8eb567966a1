"""The Transformer as CTranslate2's TransformerSpec: the family's converter for
`heed export --format ctranslate2` (heed.export.ct2 writes the files; heed.nn.transformer.family names
this converter).

The mapping, layer by layer (heed.nn.transformer -> ctranslate2.specs.transformer_spec):
- token embeddings (times sqrt(d_model) with model.scale_embeddings); the positions as an explicit
  table, heed's own values in either sinusoid layout (CTranslate2's built-in sinusoid concatenates
  sin and cos, heed's default interleaves them). A learned table is extended by its last row, as heed reads a position past it;
- each attention's in_proj: fused [q; k; v] for self-attention, q then fused [k; v] for the
  cross-attention; out_proj; the layer norms before (pre-norm) or after (post-norm) each sublayer,
  epsilon 1e-5 as torch's; the final norm of a pre-norm stack;
- the feed-forward network's activation (relu, gelu, gelu_tanh, swish);
- the generator (tied or not) as the decoder's output projection, with its bias;
- the attention CTranslate2 reports: the last decoder layer's cross-attention averaged over all its
  heads (`alignment_heads = heads`), which is what heed's step reports.
heed's vocabularies become CTranslate2's token lists in id order, and the model's decoder start,
`</s>` and `<unk>` its bos (and decoder start), eos and unknown tokens: the runtime (heed.export.ct2_run) speaks in heed's own
tokens and ids.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from heed.data.vocab import UNK
from heed.decode_config import MAX_OUTPUT_TOKENS
from heed.nn.transformer.layers import DecoderLayer, EncoderLayer
from heed.nn.transformer.model import TiedGenerator

if TYPE_CHECKING:
    from heed.nn.transformer.attention import MultiHeadAttention
    from heed.nn.transformer.config import TransformerConfig
    from heed.nn.transformer.model import TransformerDecoder, TransformerEncoder, TransformerSeq2Seq

LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, which heed's layers use


def _array(t: Tensor) -> Any:
    return t.detach().float().cpu().contiguous().numpy()


def position_table(embed: nn.Module, rows: int) -> Tensor:
    """(rows, d_model): the position vectors heed's embedding adds at positions 0 .. rows - 1 (a
    learned table clamps past its end, so the extension repeats its last row, as heed reads it)."""
    positions = embed.positions
    assert isinstance(positions, nn.Module)
    with torch.no_grad():
        return positions(torch.arange(rows)).float()


def _linear(spec: Any, weight: Tensor, bias: Tensor | None) -> None:
    spec.weight = _array(weight)
    if bias is not None:
        spec.bias = _array(bias)


def _norm(spec: Any, norm: nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _attention(spec: Any, attention: MultiHeadAttention, norm: nn.LayerNorm, *, cross: bool) -> None:
    """heed's MultiHeadAttention (in_proj [q; k; v], out_proj) into CTranslate2's linear list:
    self-attention [qkv, out], cross-attention [q, kv, out]."""
    d = attention.d_model
    w, b = attention.in_proj_weight, attention.in_proj_bias
    if cross:
        _linear(spec.linear[0], w[:d], b[:d])
        _linear(spec.linear[1], w[d:], b[d:])
    else:
        _linear(spec.linear[0], w, b)
    _linear(spec.linear[-1], attention.out_proj.weight, attention.out_proj.bias)
    _norm(spec.layer_norm, norm)


def _feed_forward(spec: Any, layer: EncoderLayer | DecoderLayer) -> None:
    _linear(spec.linear_0, layer.feed_forward.inner.weight, layer.feed_forward.inner.bias)
    _linear(spec.linear_1, layer.feed_forward.outer.weight, layer.feed_forward.outer.bias)
    _norm(spec.layer_norm, layer.feed_forward_norm)


def _stack(spec: Any, stack: TransformerEncoder | TransformerDecoder, *, positions: int, pre_norm: bool,
           scale: bool) -> None:
    """The embedding, positions and final norm shared by both stacks."""
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings  # the encoder's: a list
    embeddings.weight = _array(stack.embed.table().weight)
    spec.scale_embeddings = scale
    spec.position_encodings.encodings = _array(position_table(stack.embed, positions))
    if pre_norm:
        assert isinstance(stack.norm, nn.LayerNorm)  # a pre-norm stack's final norm
        _norm(spec.layer_norm, stack.norm)


def transformer_spec(model: TransformerSeq2Seq, cfg: TransformerConfig, *, src_tokens: list[str], tgt_tokens: list[str],
                     max_src_len: int, unk_id: int = UNK) -> Any:
    """CTranslate2's TransformerSpec holding `model`'s (a heed TransformerSeq2Seq, float32, eval) weights."""
    from ctranslate2.specs import common_spec  # type: ignore[import-untyped]
    from ctranslate2.specs import transformer_spec as ts

    pre_norm = cfg.norm == "pre"
    activation = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh", "swish": "SWISH"}[cfg.activation]
    spec = ts.TransformerSpec.from_config(
        (len(model.encoder.layers), len(model.decoder.layers)), cfg.heads, pre_norm=pre_norm,
        activation=getattr(common_spec.Activation, activation), alignment_layer=-1, alignment_heads=cfg.heads)
    # Source positions: its tokens and EOS; target positions: any output heed's search allows.
    _stack(spec.encoder, model.encoder, positions=max_src_len + 2, pre_norm=pre_norm, scale=cfg.scale_embeddings)
    _stack(spec.decoder, model.decoder, positions=MAX_OUTPUT_TOKENS + 2, pre_norm=pre_norm,
           scale=cfg.scale_embeddings)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder.layers):
        assert isinstance(layer, EncoderLayer)
        _attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_norm, cross=False)
        _feed_forward(layer_spec.ffn, layer)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder.layers):
        assert isinstance(layer, DecoderLayer)
        _attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_norm, cross=False)
        _attention(layer_spec.attention, layer.cross_attn, layer.cross_attn_norm, cross=True)
        _feed_forward(layer_spec.ffn, layer)
    generator = model.decoder.generator
    assert isinstance(generator, (TiedGenerator, nn.Linear))
    _linear(spec.decoder.projection, generator.weight, generator.bias)
    spec.config.bos_token, spec.config.eos_token = tgt_tokens[model.bos_id], tgt_tokens[model.eos_id]
    spec.config.unk_token = tgt_tokens[unk_id]
    spec.config.decoder_start_token = tgt_tokens[model.bos_id]
    spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
    spec.register_source_vocabulary(list(src_tokens))
    spec.register_target_vocabulary(list(tgt_tokens))
    return spec
