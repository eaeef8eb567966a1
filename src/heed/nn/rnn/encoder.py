"""RNN encoder: embedding, then a (bi)LSTM/GRU that never reads padding; returns every time step."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from heed.nn.masks import lengths_to_mask
from heed.nn.rnn.state import RNNState, as_state, map_state, select_batch

RNNKind = Literal["lstm", "gru"]
RNN_CLASSES: dict[str, type[nn.LSTM | nn.GRU]] = {"lstm": nn.LSTM, "gru": nn.GRU}


@dataclass(frozen=True)
class EncoderOutput:
    """Everything the decoder needs from one batch of sources.

    states: (batch, src_len, hidden)   every time step, zero under padding
    final:  RNNState, each (layers, batch, hidden)   directions concatenated per layer
    mask:   bool (batch, src_len), True = real token
    keys:   (batch, src_len, ·) the attention's projected keys, computed once per source
            (None for a decoder without attention)
    group:  decoder rows per source (beam search's beams, after `repeat`): final has
            batch * group rows, row r belongs to source r // group
    src:    long (batch, src_len) the source token ids, set by `Seq2Seq.encode` (a copy
            mechanism reads them); one copy per source, as states; None where nobody set them
    """

    states: Tensor
    final: RNNState
    mask: Tensor
    keys: Tensor | None = None
    group: int = 1
    src: Tensor | None = None

    def repeat(self, times: int) -> EncoderOutput:
        """Each source serving `times` decoder rows in a row (batch * times rows): one per beam.
        states, keys and mask stay one copy per source (the decoder attends for a source's rows in
        one grouped call, so beam search reads each source once a step, not once per beam); only
        `final`, which starts every row's decoder state, is repeated."""
        return EncoderOutput(
            states=self.states,
            final=map_state(lambda t: t.repeat_interleave(times, dim=1), self.final),
            mask=self.mask,
            keys=self.keys,
            group=self.group * times,
            src=self.src,
        )

    def select(self, sources: Tensor) -> EncoderOutput:
        """Sources `sources` (new_batch,) long, with all their decoder rows: search drops finished
        sentences."""
        rows = sources
        if self.group > 1:
            rows = (sources.unsqueeze(1) * self.group + torch.arange(self.group, device=sources.device)).view(-1)
        return EncoderOutput(
            states=self.states.index_select(0, sources),
            final=select_batch(self.final, rows),
            mask=self.mask.index_select(0, sources),
            keys=None if self.keys is None else self.keys.index_select(0, sources),
            group=self.group,
            src=None if self.src is None else self.src.index_select(0, sources),
        )

    def with_keys(self, keys: Tensor | None) -> EncoderOutput:
        return replace(self, keys=keys)


class RNNEncoder(nn.Module):
    """Embedding -> stacked (bi)RNN. `hidden_size` is the size of each output state: with
    `bidirectional`, each direction has hidden_size // 2 units and the two are concatenated
    (so a decoder of the same size can attend to and start from them directly)."""

    def __init__(
        self,
        *,
        vocab_size: int,
        embed_size: int,
        hidden_size: int,
        num_layers: int = 1,
        rnn: RNNKind = "lstm",
        bidirectional: bool = True,
        dropout: float = 0.0,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        if bidirectional and hidden_size % 2:
            raise ValueError(f"a bidirectional encoder needs an even hidden_size, got {hidden_size}")
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bidirectional = bidirectional
        self.embedding = nn.Embedding(vocab_size, embed_size, padding_idx=pad_id)
        self.dropout = nn.Dropout(dropout)
        self.rnn = RNN_CLASSES[rnn](
            embed_size,
            hidden_size // 2 if bidirectional else hidden_size,
            num_layers=num_layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if num_layers > 1 else 0.0,
        )

    def forward(self, src: Tensor, src_lengths: Tensor) -> EncoderOutput:
        """src (batch, src_len) ids, src_lengths (batch,) -> EncoderOutput."""
        embedded = self.dropout(self.embedding(src))  # (batch, src_len, embed)
        lengths = src_lengths.clamp(min=1).cpu()  # on the host, as pack and the grouping want
        distinct, counts = torch.unique(lengths, return_counts=True)  # ascending
        if embedded.device.type == "cpu" and distinct.numel() <= self._max_length_groups():
            states, final = self._run_by_length(embedded, lengths, distinct.tolist(), counts.tolist())
        else:
            states, final = self._run_packed(embedded, lengths)
        states = self.dropout(states)  # (batch, src_len, hidden)
        final = map_state(self._join_directions, final)
        return EncoderOutput(states=states, final=final, mask=lengths_to_mask(src_lengths, src.size(1)))

    def _max_length_groups(self) -> int:
        """How many distinct source lengths `_run_by_length` takes before packing is faster (CPU,
        one thread, bench/RESULTS.md "The encoder without packing"): an LSTM gains with up to 6
        groups when decoding and with any number when training; a GRU with up to 4 when training
        and only with 1 when not."""
        return 4 if isinstance(self.rnn, nn.LSTM) or torch.is_grad_enabled() else 1

    def _run_packed(self, embedded: Tensor, lengths: Tensor) -> tuple[Tensor, RNNState]:
        """One call over the packed batch, so padding never touches a state (cuDNN's way)."""
        packed = pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
        packed_out, raw_final = self.rnn(packed)
        states, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=embedded.size(1))
        return states, as_state(raw_final)

    def _run_by_length(self, embedded: Tensor, lengths: Tensor, distinct: list[int],
                       counts: list[int]) -> tuple[Tensor, RNNState]:
        """One call per distinct length over just those rows, cut to that length: no padding and no
        packing. On the CPU PyTorch runs an RNN over a packed batch with a generic step loop, and
        over an unpadded one with oneDNN's fused layer: an LSTM's forward and backward is 1.4-3.9x
        faster when a batch holds a few lengths, as bucketed training batches and length-sorted
        inference batches do.

        embedded (batch, src_len, embed) on the CPU; lengths (batch,); distinct (ascending) and
        counts: its values and how often each occurs. Returns states (batch, src_len, hidden), zero
        under padding, and the final state, each (layers * dirs, batch, hidden / dirs), in batch order."""
        src_len = embedded.size(1)
        if len(distinct) == 1:  # every row has the same length: one plain call
            states, raw_final = self.rnn(embedded[:, : distinct[0]])
            if distinct[0] < src_len:  # no copy in the common case: the batch is as long as its rows
                states = F.pad(states, (0, 0, 0, src_len - distinct[0]))
            return states, as_state(raw_final)
        order = torch.argsort(lengths, stable=True)  # rows grouped by length, ascending like `distinct`
        outputs, finals = [], []
        for n, rows in zip(distinct, order.split(counts)):
            out, raw = self.rnn(embedded.index_select(0, rows)[:, :n])  # (rows, n, hidden)
            outputs.append(F.pad(out, (0, 0, 0, src_len - n)))
            finals.append(as_state(raw))
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel())
        states = torch.cat(outputs).index_select(0, inverse)
        return states, tuple(torch.cat(parts, dim=1).index_select(1, inverse) for parts in zip(*finals))

    def _join_directions(self, t: Tensor) -> Tensor:
        """(layers * dirs, batch, hidden/dirs) -> (layers, batch, hidden)."""
        if not self.bidirectional:
            return t
        layers2, batch, half = t.shape
        t = t.view(layers2 // 2, 2, batch, half)  # (layers, dirs, batch, half)
        return torch.cat([t[:, 0], t[:, 1]], dim=-1)  # (layers, batch, hidden)


class Bridge(nn.Module):
    """Initial decoder state from the encoder's final state.

    - "copy": the top `dec_layers` encoder layers as they are (sizes must match);
    - "linear": tanh(W h) per state tensor, from the top encoder layer to every decoder layer
      (Bahdanau et al. 2015, A.2.2 initialises s_0 = tanh(W_s h_1));
    - "zeros": no information passes (a deliberately blind start).
    """

    def __init__(self, kind: Literal["copy", "linear", "zeros"], *, enc_hidden: int, enc_layers: int,
                 dec_hidden: int, dec_layers: int, num_tensors: int) -> None:
        super().__init__()
        if kind == "copy" and (enc_hidden != dec_hidden or enc_layers < dec_layers):
            raise ValueError(
                f"bridge 'copy' needs encoder hidden {enc_hidden} == decoder hidden {dec_hidden} and at "
                f"least as many encoder layers ({enc_layers}) as decoder layers ({dec_layers}); use 'linear'"
            )
        self.kind = kind
        self.dec_layers = dec_layers
        self.dec_hidden = dec_hidden
        if kind == "linear":
            self.proj = nn.ModuleList(nn.Linear(enc_hidden, dec_hidden) for _ in range(num_tensors))

    def forward(self, final: RNNState) -> RNNState:
        """final: each (enc_layers, batch, enc_hidden) -> each (dec_layers, batch, dec_hidden)."""
        if self.kind == "copy":
            return map_state(lambda t: t[t.size(0) - self.dec_layers:].contiguous(), final)
        if self.kind == "zeros":
            return map_state(lambda t: t.new_zeros(self.dec_layers, t.size(1), self.dec_hidden), final)
        return tuple(
            torch.tanh(proj(t[-1])).unsqueeze(0).expand(self.dec_layers, -1, -1).contiguous()
            for proj, t in zip(self.proj, final)
        )
