"""The RNN family's ONNX graphs (heed.export writes them, heed.export.ort runs them):

    encoder  src (batch, src_len) int64, src_lengths (batch,) int64 ->
             states (batch, src_len, hidden)   every step, zero under padding
             keys (batch, src_len, ·)          the attention's projected keys, computed once per
                                               source (attention models only)
             h0 [, c0] (layers, batch, hidden) the decoder's initial state (bridge applied)
             summary (1, batch, hidden)        the plain decoder's source summary only
    step     one decoder step with a dynamic batch and source length (see `StepGraph`)

The packed `nn.LSTM`/`nn.GRU` traces onto ONNX's own LSTM/GRU operator with `sequence_lens` (each
source stops at its length, as packing does); the step writes the cells out as MatMul/Sigmoid/Tanh.
`RNNGraphs` is the family's half of the export contract: the graphs' names, the modules to trace
with example inputs, and how the runtime maps the search's EncoderOutput onto the graphs' inputs
and outputs. The DecoderState's named tensors (h, c, feed, coverage) are the step graph's state
inputs as they are, and `<name>_out` its outputs: heed.export.ort handles them for any family.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from heed.errors import HeedError
from heed.nn.masks import lengths_to_mask
from heed.nn.rnn.config import RNNConfig
from heed.nn.rnn.coverage import initial_coverage
from heed.nn.rnn.decoder import DecoderState, LuongDecoder, RNNDecoder
from heed.nn.rnn.encoder import EncoderOutput
from heed.nn.rnn.seq2seq import Seq2Seq


class EncoderGraph(nn.Module):
    """What `Seq2Seq.encode` + `init_state` compute once per source, as one graph."""

    def __init__(self, model: Seq2Seq) -> None:
        super().__init__()
        self.encoder, self.bridge, self.decoder = model.encoder, model.bridge, model.decoder

    def forward(self, src: Tensor, src_lengths: Tensor) -> tuple[Tensor, ...]:
        """src (batch, src_len), src_lengths (batch,) -> states, [keys,] h0 [, c0] [, summary]."""
        enc = self.encoder
        embedded = enc.embedding(src)  # (batch, src_len, embed)
        packed = pack_padded_sequence(embedded, src_lengths.clamp(min=1), batch_first=True, enforce_sorted=False)
        out, raw = enc.rnn(packed)
        states, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))  # (batch, src_len, hidden)
        final = tuple(enc._join_directions(t) for t in (raw if isinstance(raw, tuple) else (raw,)))
        outputs: list[Tensor] = [states]
        keys = self.decoder.project_keys(states)  # (batch, src_len, ·), once per source; None without attention
        if keys is not None:
            outputs.append(keys)
        outputs.extend(self.bridge(final))  # each (dec_layers, batch, hidden)
        if not self.decoder.has_attention:
            outputs.append(final[0][-1:])  # (1, batch, hidden): the plain decoder's summary of the source
        return tuple(outputs)


def _cell(rnn: nn.RNNBase, layer: int, x: Tensor, hx: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """One step of layer `layer` of nn.LSTM / nn.GRU, written out (gate orders as PyTorch's:
    LSTM i, f, g, o; GRU r, z, n), so the step graph is plain MatMul/Add/Sigmoid/Tanh.
    x (rows, in), hx each (rows, hidden) -> the new state, each (rows, hidden)."""
    w_ih, w_hh, b_ih, b_hh = (getattr(rnn, f"{n}_l{layer}") for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
    if isinstance(rnn, nn.LSTM):
        h, c = hx
        gates = x @ w_ih.t() + h @ w_hh.t() + (b_ih + b_hh)  # (rows, 4 hidden)
        i, f, g, o = gates.split(rnn.hidden_size, dim=-1)  # one Split node (chunk traces to 4 Slices)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c
    (h,) = hx
    gi = x @ w_ih.t() + b_ih  # (rows, 3 hidden)
    gh = h @ w_hh.t() + b_hh
    i_r, i_z, i_n = gi.split(rnn.hidden_size, dim=-1)
    h_r, h_z, h_n = gh.split(rnn.hidden_size, dim=-1)
    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)  # PyTorch's GRU: r gates W_hn h + b_hn
    return ((1 - z) * n + z * h,)


class StepGraph(nn.Module):
    """One decoder step, the arithmetic of `LuongDecoder`/`BahdanauDecoder`/`PlainDecoder._step_features`
    plus the generator, over the same parameters (tests/export/test_export.py holds it to PyTorch's search).

    Inputs: prev_tokens (rows,) int64; h [, c] (layers, rows, hidden); feed (rows, hidden) for
    Luong with input feeding; coverage (rows, src_len) float32, c^t, for a coverage model;
    summary (rows, hidden) for plain; states (batch, src_len, hidden), keys (batch, src_len, ·)
    and src_mask bool (batch, src_len), True = real token, for attention.
    rows = batch * group: a source's `group` rows (its beams) are consecutive and attend in one
    grouped call, as `RNNDecoder._attend` does, so beams never copy the source.
    Outputs: logits (rows, vocab), h [, c] [, feed] [, coverage c^{t+1}] [, attention (rows, src_len)]."""

    def __init__(self, decoder: RNNDecoder, kind: str) -> None:
        super().__init__()
        self.decoder: Any = decoder  # Any: the three decoders' own attributes (input_feeding, combine, readout)
        self.kind = kind
        self.lstm = isinstance(decoder.rnn, nn.LSTM)
        self.feeding = kind == "luong" and isinstance(decoder, LuongDecoder) and decoder.input_feeding
        self.coverage = decoder.coverage

    def input_names(self) -> list[str]:
        return graph_names(self.kind, lstm=self.lstm, feeding=self.feeding, coverage=self.coverage)["step"][0]

    def output_names(self) -> list[str]:
        return graph_names(self.kind, lstm=self.lstm, feeding=self.feeding, coverage=self.coverage)["step"][1]

    def _rnn(self, x: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, tuple[Tensor, ...]]:
        """x (rows, in), state each (layers, rows, hidden) -> top output (rows, hidden), new state."""
        rnn, layers = self.decoder.rnn, []
        for k in range(rnn.num_layers):
            out = _cell(rnn, k, x, tuple(t[k] for t in state))
            layers.append(out)
            x = out[0]
        return x, tuple(torch.stack(parts) for parts in zip(*layers))

    def _attend(self, query: Tensor, states: Tensor, keys: Tensor, mask: Tensor,
                coverage: Tensor | None) -> tuple[Tensor, Tensor]:
        """query (rows, hidden), coverage (rows, src_len) or None -> context (rows, hidden), weights (rows, src_len)."""
        # Sizes known at export are Python ints, so they trace as constants, not Shape/Gather chains.
        grouped = query.reshape(states.size(0), -1, self.decoder.hidden_size)  # (batch, group, hidden)
        if coverage is not None:
            coverage = coverage.reshape(states.size(0), -1, coverage.size(-1))  # (batch, group, src_len)
        context, weights = self.decoder.attention(grouped, keys, states, mask, coverage=coverage)
        return context.reshape(-1, self.decoder.attention.key_size), weights.flatten(0, 1)

    def forward(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        named = dict(zip(self.input_names(), inputs))
        dec, prev = self.decoder, named["prev_tokens"]
        state: tuple[Tensor, ...] = (named["h"], named["c"]) if self.lstm else (named["h"],)
        embedded = dec.embedding(prev)  # (rows, embed)
        weights = None
        coverage = named.get("coverage")
        if self.kind == "luong":
            x = torch.cat([embedded, named["feed"]], dim=-1) if self.feeding else embedded  # Luong §3.3
            h, state = self._rnn(x, state)
            context, weights = self._attend(h, named["states"], named["keys"], named["src_mask"], coverage)
            features = torch.tanh(dec.combine(torch.cat([h, context], dim=-1)))  # Luong eq. 5
        elif self.kind == "bahdanau":
            context, weights = self._attend(state[0][-1], named["states"], named["keys"], named["src_mask"], coverage)
            s, state = self._rnn(torch.cat([embedded, context], dim=-1), state)  # Bahdanau A.1.2
            features = torch.tanh(dec.readout(torch.cat([s, context, embedded], dim=-1)))
        else:
            features, state = self._rnn(torch.cat([embedded, named["summary"]], dim=-1), state)
        outputs = [dec.generator(features), *state]  # logits (rows, vocab)
        if self.feeding:
            outputs.append(features)
        if coverage is not None:
            assert weights is not None  # a coverage decoder attends
            outputs.append(coverage + weights)  # c^{t+1} = c^t + a^t (See et al. 2017, eq. 10)
        if weights is not None:
            outputs.append(weights)
        return tuple(outputs)


def _example_inputs(model: Seq2Seq, graph: StepGraph) -> tuple[Tensor, ...]:
    """Small inputs to trace with: 2 sources, 2 rows each, 5 source positions (sizes that differ from
    each other, so the tracer cannot mistake one dimension for another)."""
    cfg = {"rows": 4, "batch": 2, "src": 5}
    dec: Any = model.decoder
    hidden, layers = dec.hidden_size, dec.rnn.num_layers
    values = {"prev_tokens": torch.full((cfg["rows"],), model.bos_id, dtype=torch.long),
              "h": torch.zeros(layers, cfg["rows"], hidden), "c": torch.zeros(layers, cfg["rows"], hidden),
              "feed": torch.zeros(cfg["rows"], hidden), "summary": torch.zeros(cfg["rows"], hidden),
              "coverage": torch.zeros(cfg["rows"], cfg["src"]),
              # a private generator: exporting leaves the global RNG as it was
              "states": torch.randn(cfg["batch"], cfg["src"], hidden, generator=torch.Generator().manual_seed(0)),
              "src_mask": torch.tensor([[True] * 5, [True] * 3 + [False] * 2])}
    if graph.kind != "plain":
        values["keys"] = dec.project_keys(values["states"])
    return tuple(values[name] for name in graph.input_names())


STEP_AXES = {"prev_tokens": {0: "rows"}, "h": {1: "rows"}, "c": {1: "rows"}, "feed": {0: "rows"},
             "summary": {0: "rows"}, "states": {0: "batch", 1: "src_len"}, "keys": {0: "batch", 1: "src_len"},
             "src_mask": {0: "batch", 1: "src_len"}, "logits": {0: "rows"}, "h_out": {1: "rows"},
             "c_out": {1: "rows"}, "feed_out": {0: "rows"}, "attention": {0: "rows", 1: "src_len"},
             "coverage": {0: "rows", 1: "src_len"}, "coverage_out": {0: "rows", 1: "src_len"}}


def graph_names(kind: str, *, lstm: bool, feeding: bool, coverage: bool) -> dict[str, tuple[list[str], list[str]]]:
    """{graph role: (input names, output names)} of a decoder `kind`'s export, in order: what the
    exporter writes and what heed.export.ort feeds and reads."""
    attention = kind != "plain"
    enc_out = ["states"] + (["keys"] if attention else []) + ["h0"] + (["c0"] if lstm else []) + \
        ([] if attention else ["summary"])
    step_in = ["prev_tokens", "h"] + (["c"] if lstm else []) + (["feed"] if feeding else []) + \
        (["coverage"] if coverage else []) + (["states", "keys", "src_mask"] if attention else ["summary"])
    step_out = ["logits", "h_out"] + (["c_out"] if lstm else []) + (["feed_out"] if feeding else []) + \
        (["coverage_out"] if coverage else []) + (["attention"] if attention else [])
    return {"encoder": (["src", "src_lengths"], enc_out), "step": (step_in, step_out)}


ENCODER_AXES = {"src": {0: "batch", 1: "src_len"}, "src_lengths": {0: "batch"},
                "states": {0: "batch", 1: "src_len"}, "keys": {0: "batch", 1: "src_len"},
                "h0": {1: "batch"}, "c0": {1: "batch"}, "summary": {1: "batch"}}


class RNNGraphs:
    """The RNN family's export contract for one model config (see heed.export.ort.OrtModel)."""

    def __init__(self, cfg: RNNConfig) -> None:
        self.kind = cfg.decoder
        self.lstm = cfg.rnn == "lstm"
        self.feeding = cfg.decoder == "luong" and cfg.input_feeding
        self.coverage = cfg.coverage
        self.has_attention = cfg.decoder != "plain"
        self.hidden_size = cfg.hidden_size
        self.rnn_tensors = 2 if self.lstm else 1
        self.max_positions = cfg.attention_positions if cfg.attention == "location" else None

    def names(self) -> dict[str, tuple[list[str], list[str]]]:
        return graph_names(self.kind, lstm=self.lstm, feeding=self.feeding, coverage=self.coverage)

    def modules(self, model: Seq2Seq) -> dict[str, tuple[nn.Module, tuple[Tensor, ...], dict[str, dict[int, str]]]]:
        """{role: (module to trace, example inputs, dynamic axes by name)}."""
        step = StepGraph(model.decoder, self.kind)
        src = torch.full((2, 5), 3, dtype=torch.long)
        return {"encoder": (EncoderGraph(model), (src, torch.tensor([5, 3])), ENCODER_AXES),
                "step": (step, _example_inputs(model, step), STEP_AXES)}

    # ------------------------------------------------------------------ the runtime's side

    def encoded(self, named: dict[str, Tensor], src: Tensor, src_lengths: Tensor) -> EncoderOutput:
        """The encoder graph's outputs -> EncoderOutput. `final` holds the decoder's initial state
        (bridge applied) and, for the plain decoder, the source summary as one more (1, batch, hidden)
        tensor, so beams repeat and select it as rows."""
        final = tuple(named[n] for n in ("h0", "c0", "summary") if n in named)
        return EncoderOutput(states=named["states"], final=final, mask=lengths_to_mask(src_lengths, src.size(1)),
                             keys=named.get("keys"), src=src)

    def check_source(self, src: Tensor) -> None:
        if self.max_positions is not None and src.size(1) > self.max_positions:
            # The graph was traced on the path for sources the location score covers (Translator cuts
            # every source to max_src_len tokens + </s>, which is attention_positions).
            raise HeedError(f"a source of {src.size(1)} tokens is longer than the {self.max_positions} positions "
                            "this exported location-score model attends over; cut it (Translator does)")

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        rnn = enc.final[: self.rnn_tensors]
        feed = rnn[0].new_zeros(rnn[0].size(1), self.hidden_size) if self.feeding else None
        coverage = initial_coverage(rnn[0].size(1), enc.states) if self.coverage else None
        return DecoderState.of(rnn, feed, coverage)

    def source_feeds(self, enc: EncoderOutput) -> dict[str, Tensor]:
        """The step graph's per-source inputs."""
        if self.has_attention:
            assert enc.keys is not None
            return {"states": enc.states, "keys": enc.keys, "src_mask": enc.mask}
        return {"summary": enc.final[-1][0]}  # (rows, hidden)

