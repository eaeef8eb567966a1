"""A full-context alignment layer (Garg et al. 2019, "Jointly Learning to Align and Translate with
Transformer Models", 4.2 "full context"; Chen et al. 2021's Mask-Align reads the whole target too):
an extra attention layer beside the decoder that reads the *whole* target, not its prefix, and
attends over the source. It is used only to align; translation never runs it.

Row k of the teacher-forced pass predicts target token k from the tokens before it. A decoder
state at row k cannot see token k or anything after it (the causal mask), which is why reading
alignments off the translator's own attention needs shift-att or guidance. The layer's row k reads

    x_k   = s_k + E[y_k]                            the decoder's last-layer state (after its norm)
                                                    and the token the row predicts (its embedding)
    h     = x + SelfAttn(LN(x))                     over every target row: no causal mask
    h     = h + FFN(LN(h))
    a_k   = mean over heads of softmax(LN(h_k) W_q (H W_k)^T / sqrt(d_k))
                                                    over the encoder's output H (batch, src_len, d_model)

and a_k (batch, tgt_len, src_len) is trained with guided alignment's loss (heed.train.alignment:
a statistical aligner's links, the task's, or `self`, the model's own shift-att).

Garg et al. run the decoder itself a second time without the causal mask and supervise its
penultimate layer, so the alignment loss moves the translator's weights. Here the layer reads the
translator's states and embeddings *detached*, with no dropout, and is initialised under a forked
random generator: the translator trains exactly as it would without the layer (the same weights at
the same seed and steps), and its logits and decoding are the model's alone
(tests/nn/transformer/test_alignment_layer.py).

Shapes: `batch, src_len, tgt_len, d_model, heads`.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple, cast

import torch
from torch import Tensor, nn

from heed.nn.loss import SeqLoss, TargetBatch, generator_loss
from heed.nn.masks import lengths_to_mask, masked_softmax
from heed.nn.transformer.attention import MultiHeadAttention
from heed.nn.transformer.config import TransformerConfig
from heed.nn.transformer.layers import DecoderLayer, FeedForward
from heed.nn.transformer.model import TransformerEncoded, TransformerSeq2Seq, build_transformer


class AlignmentLayer(nn.Module):
    """The layer of the module doc: `heads` heads of d_model / heads dimensions, its own weights."""

    def __init__(self, d_model: int, heads: int, ff_size: int) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads)
        self.self_attn_norm = nn.LayerNorm(d_model)
        self.feed_forward = FeedForward(d_model, ff_size, 0.0)
        self.feed_forward_norm = nn.LayerNorm(d_model)
        self.cross_attn = MultiHeadAttention(d_model, heads)
        self.query_norm = nn.LayerNorm(d_model)
        self.memory_norm = nn.LayerNorm(d_model)

    @property
    def heads(self) -> int:
        return self.cross_attn.heads

    def forward(self, states: Tensor, tokens: Tensor, tgt_mask: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:
        """states (batch, tgt_len, d_model) the decoder's last-layer output, tokens (batch, tgt_len,
        d_model) the embedding of the token each row predicts, tgt_mask bool (batch, tgt_len) and
        src_mask bool (batch, src_len), True = real; memory (batch, src_len, d_model) the encoder's
        output -> every head's weights (batch, heads, tgt_len, src_len), 0 on padding."""
        x = states + tokens
        q, k, v = self.self_attn.project_all(self.self_attn_norm(x))
        # Full context: every real target row sees every other (Garg et al. 2019, 4.2), no causal mask.
        x = x + self.self_attn.attend(q, k, v, tgt_mask[:, None, None, :]).context
        x = x + self.feed_forward(self.feed_forward_norm(x))
        query = self.cross_attn.project_query(self.query_norm(x))  # (batch, heads, tgt_len, d_k)
        keys, _ = self.cross_attn.project_memory(self.memory_norm(memory))  # (batch, heads, src_len, d_k)
        scores = query @ keys.transpose(-1, -2) / math.sqrt(self.cross_attn.d_k)  # (batch, heads, tgt_len, src_len)
        return masked_softmax(scores, src_mask[:, None, None, :] & tgt_mask[:, None, :, None])


class AlignedLoss(NamedTuple):
    loss: SeqLoss  # the translation loss, as TransformerSeq2Seq.loss gives it (with attention_layer's heads)
    alignment: Tensor  # (batch, heads, tgt_len, src_len) the alignment layer's every head, row t predicting tgt_out[t]


class AligningTransformer(TransformerSeq2Seq):
    """A Transformer with an alignment layer (`model.alignment_layer: true`): the same translator
    (search, teacher forcing, export see TransformerSeq2Seq alone), and the layer's weights
    (heed.nn.protocol.AlignmentLayerModel)."""

    def __init__(self, base: TransformerSeq2Seq, aligner: AlignmentLayer) -> None:
        super().__init__(base.encoder, base.decoder, pad_id=base.pad_id, bos_id=base.bos_id, eos_id=base.eos_id,
                         unk_id=base.unk_id)
        self.aligner = aligner

    def _inputs(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor,
                attention_layer: int | None) -> tuple[Tensor, Any, Tensor, Tensor]:
        """One teacher-forced pass: (the encoder's output (batch, src_len, d_model), the decoder's
        TransformerFeatures, the source mask, the layer's weights (batch, heads, tgt_len, src_len))."""
        src_mask = lengths_to_mask(src_lengths, src.size(1))  # (batch, src_len)
        memory = self.encoder(src, src_mask)
        layers = cast(list[DecoderLayer], list(self.decoder.layers))
        enc = TransformerEncoded(src_mask, tuple(layer.cross_attn.project_memory(memory) for layer in layers), src=src)
        features = self._decode_all(tgt_in, enc, need_attention=False, heads_of_layer=attention_layer)
        # Row k predicts tgt_in[k + 1] (</s> for the last real row, whose next input is padding:
        # its embedding is 0). tgt_in's rows are the target's rows: real where tgt_in is.
        predicted = torch.cat([tgt_in[:, 1:], torch.full_like(tgt_in[:, :1], self.pad_id)], dim=1)
        tokens = self.decoder.embed.table()(predicted) * self.decoder.embed.scale  # (batch, tgt_len, d_model)
        weights = self.aligner(features.features.detach(), tokens.detach(), tgt_in != self.pad_id,
                               memory.detach(), src_mask)
        return memory, features, src_mask, weights

    def alignment_heads(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced: the alignment layer's every head over the source, (1, heads, batch,
        tgt_len, src_len), row t for the target token t (as attention_heads' one layer)."""
        return self._inputs(src, src_lengths, tgt_in, None)[3].transpose(0, 1).unsqueeze(0)

    def loss_with_alignment(self, batch: TargetBatch, *, label_smoothing: float = 0.0,
                            attention_layer: int | None = None) -> AlignedLoss:
        """The translation loss of TransformerSeq2Seq.loss (with `attention_layer`'s heads in
        SeqLoss.attention, for the `self` supervision) and the alignment layer's weights, from one
        pass (heed.train.alignment trains the layer on them)."""
        if attention_layer is not None and not 0 <= attention_layer < self.layers:
            raise ValueError(f"attention_layer {attention_layer}: the decoder has layers 0..{self.layers - 1}")
        _, features, _, weights = self._inputs(batch.src, batch.src_lengths, batch.tgt_in, attention_layer)
        cross_entropy = generator_loss(features.features, self.decoder.generator, batch.tgt_out,  # type: ignore[arg-type]
                                       ignore_index=self.pad_id, label_smoothing=label_smoothing)
        return AlignedLoss(SeqLoss(cross_entropy, cross_entropy, None, features.layer_heads), weights)


def build(cfg: TransformerConfig, **sizes: Any) -> TransformerSeq2Seq:
    """The family's builder: heed.nn.transformer.model.build_transformer, with the alignment layer
    when `cfg.alignment_layer`. The layer is made under a forked generator, so the translator's
    initial weights and every random draw after them are those of the model without it."""
    model = build_transformer(cfg, **sizes)
    if not cfg.alignment_layer:
        return model
    with torch.random.fork_rng(devices=[]):
        aligner = AlignmentLayer(cfg.d_model, cfg.heads, cfg.ff_size)
    return AligningTransformer(model, aligner)


__all__ = ["AlignedLoss", "AligningTransformer", "AlignmentLayer", "build"]
