"""An ensemble of models behind the search's protocol: each step decodes with the mean of the
members' log-probabilities.

`Ensemble([model_a, model_b, ...])` is itself a `heed.search.SearchModel`: `encode` encodes the
batch with every member, `init_state` and `step` run every member on its own encoding and state,
and `select`/`repeat` reorder every member's rows alike. So greedy search, beam search, sampling,
n-best lists, forced prefixes and the penalties run over it unchanged; search never knows it is
not one model. A member is anything that meets the protocol: a heed.nn.rnn.seq2seq.Seq2Seq, an exported
model (heed.export.ort.OrtSeq2Seq), a test's scripted fake.

The combination, at every step t (OpenNMT-py's ensemble decoding; fairseq averages probabilities
instead):

    logits_t = (1/M) sum_m log p_m(y_t | y_<t, x)          # (rows, vocab)

Search log-softmaxes what a model's step returns, so the ensemble's distribution is the members'
normalised geometric mean, a product of experts (Hinton 2002): p(y) proportional to
prod_m p_m(y)^(1/M). A token any member rules out (probability 0) stays ruled out; an ensemble of a
model with itself is that model. Hypothesis scores are log-probabilities under that distribution.

The attention behind a step (for heatmaps, alignments, <unk> replacement and the coverage penalty) is
the mean of the members' attention; members without attention are left out of the mean, and an
ensemble none of whose members attends has none.

All members read the same source ids and write the same target ids (heed.api checks their
tokenizers and vocabularies before it builds one): search hands the ensemble one batch of source
ids and takes one token id per row from it, and the mean attention is taken position by position.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from heed.nn.protocol import Encoded, SearchModel, SearchState, Seq2SeqOutput


@dataclass(frozen=True)
class EnsembleEncoded:
    """Every member's encoding of the same batch, in member order."""

    members: tuple[Encoded, ...]

    @property
    def mask(self) -> Tensor:
        """bool (batch, src_len), True = real token: the same for every member (same source ids)."""
        return self.members[0].mask

    def repeat(self, times: int) -> EnsembleEncoded:
        return EnsembleEncoded(tuple(enc.repeat(times) for enc in self.members))

    def select(self, sources: Tensor) -> EnsembleEncoded:
        return EnsembleEncoded(tuple(enc.select(sources) for enc in self.members))


@dataclass(frozen=True)
class EnsembleState:
    """Every member's decoder state for the same rows, in member order."""

    members: tuple[SearchState, ...]

    def select(self, indices: Tensor) -> EnsembleState:
        return EnsembleState(tuple(state.select(indices) for state in self.members))


class EnsembleStep(NamedTuple):
    """logits (rows, vocab): the mean of the members' log-probabilities; state: every member's next
    state; attention (rows, src_len): the mean over the members with attention, or None."""

    logits: Tensor
    state: EnsembleState
    attention: Tensor | None


def mean_log_probs(logits: Sequence[Tensor]) -> Tensor:
    """(1/M) sum_m log_softmax(logits_m) over the last (vocab) axis, in float32 (a bf16 member's
    logits are widened first, as search does). logits: M tensors (..., vocab) -> (..., vocab)."""
    return torch.stack([torch.log_softmax(x.float(), dim=-1) for x in logits]).mean(0)


def mean_attention(weights: Sequence[Tensor | None]) -> Tensor | None:
    """The mean of the members' attention (..., src_len), leaving out members without (None);
    None when no member has attention."""
    present = [w.float() for w in weights if w is not None]
    return None if not present else torch.stack(present).mean(0)


class Ensemble:
    """Models decoding as one: `heed.search` over `Ensemble(models)` (see the module docstring).

    Every member must use the same special ids (pad, bos, eos); a member must be in eval mode and
    on the device the search's tensors are on."""

    def __init__(self, members: Sequence[SearchModel]) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one model")
        ids = {(m.pad_id, m.bos_id, m.eos_id, m.unk_id) for m in members}
        if len(ids) != 1:
            raise ValueError(f"the ensemble's models disagree on their (pad, bos, eos, unk) ids: {sorted(ids)}")
        self.members: tuple[SearchModel, ...] = tuple(members)
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = ids.pop()

    @property
    def has_attention(self) -> bool:
        """Whether any member attends (those that do give the ensemble's attention)."""
        return any(m.has_attention for m in self.members)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ the search's protocol

    def encode(self, src: Tensor, src_lengths: Tensor) -> EnsembleEncoded:
        """src (batch, src_len), src_lengths (batch,) -> every member's encoding."""
        return EnsembleEncoded(tuple(m.encode(src, src_lengths) for m in self.members))

    def init_state(self, enc: EnsembleEncoded) -> EnsembleState:
        return EnsembleState(tuple(m.init_state(e) for m, e in zip(self.members, enc.members)))

    def step(self, prev_tokens: Tensor, state: EnsembleState, enc: EnsembleEncoded) -> EnsembleStep:
        """prev_tokens (rows,) -> EnsembleStep(mean log-probs (rows, vocab), states, mean attention)."""
        outs = [m.step(prev_tokens, s, e) for m, s, e in zip(self.members, state.members, enc.members)]
        return EnsembleStep(mean_log_probs([o.logits for o in outs]), EnsembleState(tuple(o.state for o in outs)),
                            mean_attention([o.attention for o in outs]))

    # ------------------------------------------------------------------ what Translator expects

    def __call__(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, *,
                 need_attention: bool = True) -> Seq2SeqOutput:
        """Teacher-forced, as `Seq2Seq.forward`: tgt_in (batch, tgt_len) starting with BOS ->
        logits (batch, tgt_len, vocab) = the mean of the members' log-probabilities (what `step`
        gives, step by step), attention (batch, tgt_len, src_len): the members' mean, or None."""
        outs = [m(src, src_lengths, tgt_in, need_attention=need_attention)  # type: ignore[operator]
                for m in self.members]
        attention = mean_attention([o.attention for o in outs]) if need_attention else None
        return Seq2SeqOutput(mean_log_probs([o.logits for o in outs]), attention)

    def num_parameters(self) -> int:
        """Every member's, summed."""
        return sum(m.num_parameters() for m in self.members)  # type: ignore[attr-defined]


__all__ = ["Ensemble", "EnsembleEncoded", "EnsembleState", "EnsembleStep", "mean_attention", "mean_log_probs"]
