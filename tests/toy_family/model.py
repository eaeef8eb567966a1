"""A bag-of-embeddings translator: the source is its token embeddings (no encoder), each step's
query is the previous output token's embedding, one attention over the source gives the context,
and the output layer reads [query; context]. No recurrence: its state is the previous token only,
so a step is a function of (previous token, source), and the teacher-forced pass is every step at once."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from heed.nn.loss import SeqLoss, TargetBatch, generator_loss
from heed.nn.masks import lengths_to_mask, masked_softmax
from heed.nn.protocol import Seq2SeqOutput, TensorState


@dataclass(frozen=True)
class ToyEncoded:
    keys: Tensor  # (batch, src_len, embed) one per source
    mask: Tensor  # (batch, src_len), True = real token
    group: int = 1  # decoder rows per source (beams, after `repeat`)

    def repeat(self, times: int) -> ToyEncoded:
        return ToyEncoded(self.keys, self.mask, self.group * times)

    def select(self, sources: Tensor) -> ToyEncoded:
        return ToyEncoded(self.keys.index_select(0, sources), self.mask.index_select(0, sources), self.group)

    def rows(self) -> tuple[Tensor, Tensor]:
        """keys (rows, src_len, embed) and mask (rows, src_len), one per decoder row."""
        return self.keys.repeat_interleave(self.group, 0), self.mask.repeat_interleave(self.group, 0)


@dataclass(frozen=True)
class ToyStep:
    logits: Tensor  # (rows, vocab)
    state: TensorState
    attention: Tensor  # (rows, src_len)


class ToySeq2Seq(nn.Module):
    family = "toy"
    has_attention = True

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, embed_size: int, *, pad_id: int, bos_id: int,
                 eos_id: int) -> None:
        super().__init__()
        self.src_embed = nn.Embedding(src_vocab_size, embed_size, padding_idx=pad_id)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, embed_size, padding_idx=pad_id)
        self.generator = nn.Linear(2 * embed_size, tgt_vocab_size)
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = pad_id, bos_id, eos_id, 3

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def encode(self, src: Tensor, src_lengths: Tensor) -> ToyEncoded:
        return ToyEncoded(self.src_embed(src), lengths_to_mask(src_lengths, src.size(1)))

    def init_state(self, enc: ToyEncoded) -> TensorState:
        rows = enc.mask.size(0) * enc.group
        return TensorState({"prev": torch.full((rows,), self.bos_id, dtype=torch.long, device=enc.mask.device)},
                           {"prev": 0})

    def _features(self, queries: Tensor, enc: ToyEncoded) -> tuple[Tensor, Tensor]:
        """queries (batch, tgt_len, embed) -> features (batch, tgt_len, 2 * embed), weights (batch, tgt_len, src_len)."""
        keys, mask = enc.rows()
        weights = masked_softmax(queries @ keys.transpose(1, 2), mask[:, None, :])
        return torch.cat([queries, weights @ keys], dim=-1), weights

    def step(self, prev_tokens: Tensor, state: TensorState, enc: ToyEncoded) -> ToyStep:
        features, weights = self._features(self.tgt_embed(prev_tokens)[:, None, :], enc)
        return ToyStep(self.generator(features[:, 0]), state.replaced({"prev": prev_tokens}), weights[:, 0])

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, *, need_attention: bool = True) -> Seq2SeqOutput:
        features, weights = self._features(self.tgt_embed(tgt_in), self.encode(src, src_lengths))
        return Seq2SeqOutput(self.generator(features), weights if need_attention else None)

    def loss(self, batch: TargetBatch, *, label_smoothing: float = 0.0) -> SeqLoss:
        features, _ = self._features(self.tgt_embed(batch.tgt_in), self.encode(batch.src, batch.src_lengths))
        cross_entropy = generator_loss(features, self.generator, batch.tgt_out, ignore_index=self.pad_id,
                                       label_smoothing=label_smoothing)
        return SeqLoss(cross_entropy, cross_entropy, None)

    def compile_teacher_forced(self) -> None:
        """Nothing to compile: one matrix product a pass."""

    def for_decoding(self) -> None:
        """No layout to change for decoding."""


def build_toy(cfg, *, src_vocab_size: int, tgt_vocab_size: int, pad_id: int, bos_id: int, eos_id: int,
              unk_id: int, source_to_target=None) -> ToySeq2Seq:
    return ToySeq2Seq(src_vocab_size, tgt_vocab_size, cfg.embed_size, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id)
