"""Decoders over an EncoderOutput: Luong (attention after the RNN), Bahdanau (attention before it),
and Plain (no attention; the baseline to compare with).

Every decoder speaks the same small protocol, which is all that search sees:
    init_state(rnn_state, enc) -> DecoderState (named tensors h, c, feed, coverage)
    step(prev_tokens (batch,), state, enc) -> DecoderStep(logits (batch, vocab), state, attention)
    state.select(indices) -> DecoderState
and `forward(tgt_in, state, enc)` runs the teacher-forced pass over a whole target. `Seq2Seq.loss`
calls `forward_features` instead: the same pass up to the generator's input, which
heed.nn.loss.generator_loss turns into the loss without materialising the logits.

With copy attention (`copy_source_to_target=` makes `self.copy` a heed.nn.rnn.copy.PointerGenerator;
Luong and Bahdanau only) a step's `logits` are the log-probabilities of See et al.'s mixture over
the extended vocabulary, (batch, vocab + temporary ids): search log-softmaxes them, which leaves
them unchanged. Tokens fed back may then be temporary ids; the embedding reads them as <unk>. With
coverage as well (See et al. 2017's full model) the mixture copies with the coverage-aware weights
of the same step.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from heed.nn.intervention import active as intervention_active
from heed.nn.protocol import TensorState
from heed.nn.rnn.attention import Attention, ScoreName
from heed.nn.rnn.copy import PointerGenerator
from heed.nn.rnn.coverage import initial_coverage
from heed.nn.rnn.encoder import RNN_CLASSES, EncoderOutput, RNNKind
from heed.nn.rnn.feeding import InputFeedingLSTM, gate_order
from heed.nn.rnn.state import RNNState, as_raw, as_state

# Each state tensor's batch (row) axis: h and c are (layers, rows, hidden), feed (rows, hidden),
# coverage (rows, src_len). The names are the exported step graph's inputs (and `<name>_out` its outputs).
RNN_BATCH_AXES = {"h": 1, "c": 1, "feed": 0, "coverage": 0}


class DecoderState(TensorState):
    """An RNN decoder's state as named tensors (heed.nn.protocol.TensorState), so search, ensembles
    and the exported step graph handle it as they handle any family's:

    h, c:      (layers, rows, hidden) the RNN's state; c for an LSTM only
    feed:      (rows, hidden) the previous attentional state h~_{t-1}, for Luong input feeding only
    coverage:  (rows, src_len) c^t, the sum of the attention weights of the steps so far
               (heed.nn.rnn.coverage), for a coverage model only
    """

    @staticmethod
    def of(rnn: RNNState, feed: Tensor | None = None, coverage: Tensor | None = None) -> DecoderState:
        """From the RNN's state tuple (h,) or (h, c), and the feed and coverage where the decoder has them."""
        tensors = dict(zip(("h", "c"), rnn))
        if feed is not None:
            tensors["feed"] = feed
        if coverage is not None:
            tensors["coverage"] = coverage
        return DecoderState(tensors, RNN_BATCH_AXES)

    @property
    def rnn(self) -> RNNState:
        """(h,) or (h, c), as nn.GRU / nn.LSTM state (heed.nn.rnn.state)."""
        tensors = self.tensors
        return (tensors["h"], tensors["c"]) if "c" in tensors else (tensors["h"],)

    @property
    def feed(self) -> Tensor | None:
        return self.tensors.get("feed")

    @property
    def coverage(self) -> Tensor | None:
        return self.tensors.get("coverage")


class DecoderStep(NamedTuple):
    logits: Tensor  # (batch, vocab); with copy attention log-probabilities (batch, vocab + temporary ids)
    state: DecoderState
    attention: Tensor | None  # (batch, src_len); None for PlainDecoder


class DecoderOutput(NamedTuple):
    logits: Tensor  # (batch, tgt_len, vocab); with copy attention log-probabilities (batch, tgt_len, vocab + temporary ids)
    attention: Tensor | None  # (batch, tgt_len, src_len); None for PlainDecoder or when not asked for


class DecoderFeatures(NamedTuple):
    features: Tensor  # (batch, tgt_len, generator_input) the generator's input, dropout applied
    attention: Tensor | None  # (batch, tgt_len, src_len); None for PlainDecoder or when not asked for
    copy_input: Tensor | None = None  # (batch, tgt_len, context + hidden + embed) [h*_t; s_t; x_t]; copy only


class _StepFeatures(NamedTuple):
    """One step up to the generator: features (batch, generator_input) before dropout, the new
    state, the attention weights (batch, src_len) or None, and with copy attention the switch's
    input [h*_t; s_t; x_t] (batch, context + hidden + embed), else None."""

    features: Tensor
    state: DecoderState
    attention: Tensor | None
    copy_input: Tensor | None


class RNNDecoder(nn.Module):
    """What the three decoders share: target embedding, an RNN, dropout and the generator."""

    has_attention = True
    coverage = False  # whether the attention takes a coverage vector carried in DecoderState
    attention: Attention  # set by the decoders with attention (Luong, Bahdanau), read only by them

    def __init__(self, *, vocab_size: int, embed_size: int, hidden_size: int, rnn_input_size: int,
                 num_layers: int, rnn: RNNKind, dropout: float, pad_id: int, generator_input: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(vocab_size, embed_size, padding_idx=pad_id)
        self.dropout = nn.Dropout(dropout)
        self.rnn = RNN_CLASSES[rnn](rnn_input_size, hidden_size, num_layers=num_layers, batch_first=True,
                                    dropout=dropout if num_layers > 1 else 0.0)
        self.generator = nn.Linear(generator_input, vocab_size)
        self.copy: PointerGenerator | None = None

    def _embed(self, tokens: Tensor) -> Tensor:
        """tokens (batch, [tgt_len]) -> embeddings (batch, [tgt_len,] embed), dropout applied; a copy
        decoder's temporary ids are read as <unk>."""
        if self.copy is not None:
            tokens = self.copy.embeddable(tokens)
        return self.dropout(self.embedding(tokens))

    def _copy_input(self, context: Tensor, state: Tensor, embedded: Tensor) -> Tensor | None:
        """[h*_t; s_t; x_t], the switch's input (See et al. 2017, eq. 8), or None without copy."""
        return None if self.copy is None else torch.cat([context, state, embedded], dim=-1)

    def _mix(self, logits: Tensor, copy_input: Tensor, weights: Tensor | None, enc: EncoderOutput) -> Tensor:
        """The pointer-generator's log-probabilities over the extended vocabulary (heed.nn.rnn.copy):
        logits (rows, [tgt_len,] vocab) -> (rows, [tgt_len,] vocab + the batch's temporary ids)."""
        assert self.copy is not None and enc.src is not None, "copy attention needs the source ids (Seq2Seq.encode)"
        assert weights is not None, "a copy decoder returns its attention whatever need_attention says"
        copy_ids, n_unknown = self.copy.extended_ids(enc.src)  # (batch, src_len), one row per source
        if enc.group > 1:
            copy_ids = copy_ids.repeat_interleave(enc.group, dim=0)  # (rows, src_len): a row per beam
        return self.copy(logits, copy_input, weights, copy_ids, self.copy.target_size + n_unknown)

    def project_keys(self, states: Tensor) -> Tensor | None:
        """states (batch, src_len, memory) -> projected keys, once per source."""
        return self.attention.project_keys(states)

    def init_state(self, rnn_state: RNNState, enc: EncoderOutput) -> DecoderState:
        return DecoderState.of(rnn_state, coverage=self._initial_coverage(rnn_state, enc))

    def _initial_coverage(self, rnn_state: RNNState, enc: EncoderOutput) -> Tensor | None:
        """c^0 = 0 (rows, src_len) for a coverage model, else None."""
        return initial_coverage(rnn_state[0].size(1), enc.states) if self.coverage else None

    @staticmethod
    def _covered(coverage: Tensor | None, weights: Tensor | None) -> Tensor | None:
        """c^{t+1} = c^t + a^t (See et al. 2017, eq. 10): coverage (rows, src_len), weights (rows, src_len)."""
        if coverage is None:
            return None
        assert weights is not None
        return coverage + weights.to(coverage.dtype)

    def _attend(self, query: Tensor, enc: EncoderOutput, need_attention: bool = True,
                coverage: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """query (rows, q) for one step or (batch, tgt_len, q) for all -> context and weights of the
        same leading shape; coverage (rows, src_len), one step only, for a coverage model. When
        sources serve several rows (enc.group > 1: beams), a source's rows attend in one grouped
        call, as the steps of one target do: (batch, group, q)."""
        grouped = query.dim() == 2 and enc.group > 1
        if grouped:
            query = query.view(-1, enc.group, query.size(-1))  # (batch, group, q)
            if coverage is not None:
                coverage = coverage.view(-1, enc.group, coverage.size(-1))  # (batch, group, src_len)
        assert enc.keys is not None, "Seq2Seq.encode projects the keys once per source"
        if need_attention:
            context, weights = self.attention(query, enc.keys, enc.states, enc.mask, coverage=coverage)
        else:
            context = self.attention.context(query, enc.keys, enc.states, enc.mask, coverage=coverage)
            weights = None
        if grouped:
            context = context.flatten(0, 1)  # (rows, memory)
            weights = None if weights is None else weights.flatten(0, 1)  # (rows, src_len)
        return context, weights

    def _run_rnn(self, inputs: Tensor, state: RNNState) -> tuple[Tensor, RNNState]:
        """inputs (batch, steps, in) -> outputs (batch, steps, hidden), new state."""
        outputs, raw = self.rnn(inputs, as_raw(state))
        return outputs, as_state(raw)

    def _step_rnn(self, inputs: Tensor, state: RNNState) -> tuple[Tensor, RNNState]:
        """One time step: inputs (batch, in) -> top layer's output (batch, hidden), new state.

        Runs the cell kernels over nn.LSTM/nn.GRU's own parameters (so checkpoints keep one layout):
        a one-step call of the sequence module costs about twice as much on CPU, and the step loop
        (input feeding, Bahdanau, search) is where decoding spends its time.
        """
        rnn = self.rnn
        lstm = isinstance(rnn, nn.LSTM)
        x, new_layers = inputs, []
        for layer in range(rnn.num_layers):
            if layer > 0 and rnn.dropout and self.training:
                x = F.dropout(x, rnn.dropout, training=True)  # between layers, as nn.LSTM does
            weights = [getattr(rnn, f"{name}_l{layer}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            hx = tuple(t[layer] for t in state)  # an LSTM's (h, c), a GRU's (h,)
            out = as_state(torch.lstm_cell(x, hx, *weights) if lstm else torch.gru_cell(x, hx[0], *weights))
            new_layers.append(out)
            x = out[0]  # (batch, hidden)
        return x, tuple(torch.stack(parts) for parts in zip(*new_layers))

    def _step_features(self, prev_tokens: Tensor, state: DecoderState, enc: EncoderOutput) -> _StepFeatures:
        """One step up to the generator: prev_tokens (batch,)."""
        raise NotImplementedError

    def step(self, prev_tokens: Tensor, state: DecoderState, enc: EncoderOutput) -> DecoderStep:
        features, state, weights, copy_input = self._step_features(prev_tokens, state, enc)
        logits = self.generator(self.dropout(features))  # (batch, vocab)
        if copy_input is not None:
            logits = self._mix(logits, copy_input, weights, enc)  # (batch, vocab + temporary ids)
        return DecoderStep(logits, state, weights)

    def forward_features(self, tgt_in: Tensor, state: DecoderState, enc: EncoderOutput, *,
                         need_attention: bool = True) -> DecoderFeatures:
        """Teacher-forced pass up to the generator, one step at a time. tgt_in (batch, tgt_len).
        A copy decoder returns the attention whatever `need_attention` says: its loss needs it."""
        features: list[Tensor] = []
        attention: list[Tensor] = []  # a decoder with attention's every step's
        copy_inputs: list[Tensor] = []  # a copy decoder's every step's
        for t in range(tgt_in.size(1)):
            out = self._step_features(tgt_in[:, t], state, enc)
            state = out.state
            features.append(out.features)
            if out.attention is not None:
                attention.append(out.attention)
            if out.copy_input is not None:
                copy_inputs.append(out.copy_input)
        copying = self.copy is not None
        weights = torch.stack(attention, dim=1) if self.has_attention and (need_attention or copying) else None
        copy_input = torch.stack(copy_inputs, dim=1) if copying else None
        return DecoderFeatures(self.dropout(torch.stack(features, dim=1)), weights, copy_input)

    def forward(self, tgt_in: Tensor, state: DecoderState, enc: EncoderOutput, *,
                need_attention: bool = True) -> DecoderOutput:
        """Teacher-forced pass. tgt_in (batch, tgt_len) -> logits (batch, tgt_len, vocab), weights."""
        out = self.forward_features(tgt_in, state, enc, need_attention=need_attention)
        logits = self.generator(out.features)  # (batch, tgt_len, vocab)
        if out.copy_input is not None:
            logits = self._mix(logits, out.copy_input, out.attention, enc)  # (batch, tgt_len, vocab + temporary ids)
        return DecoderOutput(logits, out.attention)


class LuongDecoder(RNNDecoder):
    """Luong et al. 2015: h_t = RNN(y_{t-1} [; h~_{t-1}]), c_t = attend(h_t),
    h~_t = tanh(W_c [h_t; c_t]) (eq. 5), logits = W_gen h~_t (eq. 6)."""

    def __init__(self, *, vocab_size: int, embed_size: int, hidden_size: int, memory_size: int,
                 num_layers: int = 1, rnn: RNNKind = "lstm", score: ScoreName = "general",
                 input_feeding: bool = True, attention_hidden: int | None = None,
                 attention_positions: int | None = None, attention_window: int | None = None,
                 coverage: bool = False, dropout: float = 0.0, pad_id: int = 0,
                 copy_source_to_target: Sequence[int] | None = None, unk_id: int = 3) -> None:
        super().__init__(vocab_size=vocab_size, embed_size=embed_size, hidden_size=hidden_size,
                         rnn_input_size=embed_size + (hidden_size if input_feeding else 0),
                         num_layers=num_layers, rnn=rnn, dropout=dropout, pad_id=pad_id,
                         generator_input=hidden_size)
        self.input_feeding = input_feeding
        self.coverage = coverage
        self.attention = Attention(score, query_size=hidden_size, key_size=memory_size,
                                   hidden_size=attention_hidden, max_positions=attention_positions,
                                   window=attention_window, coverage=coverage)
        self.combine = nn.Linear(hidden_size + memory_size, hidden_size, bias=False)  # W_c
        if copy_source_to_target is not None:
            self.copy = PointerGenerator(context_size=memory_size, state_size=hidden_size, input_size=embed_size,
                                         source_to_target=copy_source_to_target, target_size=vocab_size,
                                         unk_id=unk_id)

    def init_state(self, rnn_state: RNNState, enc: EncoderOutput) -> DecoderState:
        feed = rnn_state[0].new_zeros(rnn_state[0].size(1), self.hidden_size) if self.input_feeding else None
        return DecoderState.of(rnn_state, feed, self._initial_coverage(rnn_state, enc))

    def _attentional(self, h: Tensor, enc: EncoderOutput, need_attention: bool,
                     coverage: Tensor | None = None) -> tuple[Tensor, Tensor | None, Tensor]:
        """h (batch, [tgt_len,] hidden) -> h~ of the same shape, weights (batch, [tgt_len,] src_len),
        context (batch, [tgt_len,] memory); coverage (batch, src_len) for one step of a coverage model."""
        context, weights = self._attend(h, enc, need_attention, coverage)
        return torch.tanh(self.combine(torch.cat([h, context], dim=-1))), weights, context  # Luong eq. 5

    def _step_features(self, prev_tokens: Tensor, state: DecoderState, enc: EncoderOutput) -> _StepFeatures:
        embedded = self._embed(prev_tokens)  # (batch, embed)
        if self.input_feeding:  # Luong §3.3
            assert state.feed is not None, "init_state and every step give an input-feeding decoder its feed"
            inputs = torch.cat([embedded, state.feed], dim=-1)
        else:
            inputs = embedded
        h, rnn_state = self._step_rnn(inputs, state.rnn)  # (batch, hidden)
        h_tilde, weights, context = self._attentional(h, enc, need_attention=True,
                                                      coverage=state.coverage)  # (batch, hidden)
        feed = h_tilde if self.input_feeding else None
        return _StepFeatures(h_tilde, DecoderState.of(rnn_state, feed, self._covered(state.coverage, weights)), weights,
                             self._copy_input(context, h, embedded))

    def forward_features(self, tgt_in: Tensor, state: DecoderState, enc: EncoderOutput, *,
                         need_attention: bool = True) -> DecoderFeatures:
        # h~_{t-1} feeds step t, or c^t sums the weights of steps before t: a loop over time is inherent
        if self.input_feeding or self.coverage:
            if self.fusable(tgt_in):
                return self.forward_fused(tgt_in, state, enc, need_attention=need_attention)
            return super().forward_features(tgt_in, state, enc, need_attention=need_attention)
        # Without input feeding the RNN never sees attention: run it over the whole target in one
        # call, then attend for all steps in one batched call.
        embedded = self._embed(tgt_in)  # (batch, tgt_len, embed)
        outputs, _ = self._run_rnn(embedded, state.rnn)  # (batch, tgt_len, hidden)
        h_tilde, weights, context = self._attentional(outputs, enc, need_attention or self.copy is not None)
        return DecoderFeatures(self.dropout(h_tilde), weights, self._copy_input(context, outputs, embedded))

    def fusable(self, tgt_in: Tensor) -> bool:
        """Whether the teacher-forced pass can run as one hand-written autograd node
        (heed.nn.rnn.feeding): input feeding, LSTM, a dot-product score over the whole source (not
        local-p's window, no coverage), on the CPU, no copy attention (whose switch needs the context
        vectors, which the fused pass keeps to itself). On CUDA the step loop stays until the fused
        pass is measured there. Not under torch.compile: inductor fuses the step loop itself, and the
        hand-written node is opaque to it (Seq2Seq.compile_teacher_forced). Not under an attention
        intervention (heed.nn.intervention), which the step loop's attention applies."""
        return (self.input_feeding and not self.coverage and isinstance(self.rnn, nn.LSTM) and not tgt_in.is_cuda
                and self.copy is None
                and self.attention.score in ("dot", "general", "scaled_dot") and self.attention.window is None
                and not torch.compiler.is_compiling() and not intervention_active())

    def forward_fused(self, tgt_in: Tensor, state: DecoderState, enc: EncoderOutput, *,
                      need_attention: bool = True) -> DecoderFeatures:
        """The input-feeding pass through InputFeedingLSTM: the same numbers as the step loop.
        Under autocast its GEMMs run in the autocast dtype and everything else in float32."""
        rnn, layers_n = self.rnn, self.rnn.num_layers
        device = tgt_in.device.type
        compute_dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        first_weight = rnn.weight_ih_l0
        assert isinstance(first_weight, Tensor)
        dtype = first_weight.dtype
        with torch.autocast(device, enabled=False):
            embed = self.embedding.embedding_dim
            order = gate_order(self.hidden_size, tgt_in.device)  # rows (i, f, g, o) -> (o, i, f, g)

            def layer_weights(k: int) -> tuple[Tensor, Tensor, Tensor]:  # W_ih, W_hh, b_ih + b_hh, rows reordered
                w_ih, w_hh = getattr(rnn, f"weight_ih_l{k}"), getattr(rnn, f"weight_hh_l{k}")
                bias = getattr(rnn, f"bias_ih_l{k}") + getattr(rnn, f"bias_hh_l{k}")
                return w_ih[order], w_hh[order], bias[order]

            w_ih, w_hh, bias = layer_weights(0)  # w_ih (4H, embed + H) over [y_{t-1}; h~_{t-1}]
            embedded = self.dropout(self.embedding(tgt_in)).transpose(0, 1)  # (T, B, embed)
            gx = F.linear(embedded, w_ih[:, :embed], bias)  # (T, B, 4H)
            layers = [torch.cat([w_ih[:, embed:], w_hh], dim=1)]
            for k in range(1, layers_n):
                w_ih, w_hh, bias = layer_weights(k)
                layers += [torch.cat([w_ih, w_hh], dim=1), bias]
            drop = None
            if self.training and rnn.dropout and layers_n > 1:  # between layers, as nn.LSTM does
                keep = 1.0 - rnn.dropout
                drop = gx.new_empty(layers_n - 1, *gx.shape[:2], self.hidden_size).bernoulli_(keep).div_(keep)
            assert enc.keys is not None and state.feed is not None, "Seq2Seq.encode and init_state give them"
            keys = enc.keys.to(dtype)
            scale = keys.size(-1) ** -0.5 if self.attention.score == "scaled_dot" else 1.0
            h0, c0 = (t.to(dtype) for t in state.rnn)
            h_tilde, weights = InputFeedingLSTM.apply(
                gx, h0, c0, state.feed.to(dtype), keys, enc.states.to(dtype), ~enc.mask, self.combine.weight,
                drop, scale, compute_dtype, *layers)
        features = self.dropout(h_tilde.transpose(0, 1))  # (B, T, H)
        return DecoderFeatures(features, weights.transpose(0, 1) if need_attention else None)


class BahdanauDecoder(RNNDecoder):
    """Bahdanau et al. 2015, A.1.2: c_t = attend(s_{t-1}); s_t = RNN([y_{t-1}; c_t], s_{t-1});
    readout t_t = tanh(W_o [s_t; c_t; y_{t-1}]) (tanh in place of the paper's maxout), logits = W t_t."""

    def __init__(self, *, vocab_size: int, embed_size: int, hidden_size: int, memory_size: int,
                 num_layers: int = 1, rnn: RNNKind = "lstm", score: ScoreName = "additive",
                 attention_hidden: int | None = None, attention_positions: int | None = None,
                 attention_window: int | None = None, coverage: bool = False, dropout: float = 0.0,
                 pad_id: int = 0, copy_source_to_target: Sequence[int] | None = None, unk_id: int = 3) -> None:
        super().__init__(vocab_size=vocab_size, embed_size=embed_size, hidden_size=hidden_size,
                         rnn_input_size=embed_size + memory_size, num_layers=num_layers, rnn=rnn,
                         dropout=dropout, pad_id=pad_id, generator_input=hidden_size)
        self.coverage = coverage
        self.attention = Attention(score, query_size=hidden_size, key_size=memory_size,
                                   hidden_size=attention_hidden, max_positions=attention_positions,
                                   window=attention_window, coverage=coverage)
        self.readout = nn.Linear(hidden_size + memory_size + embed_size, hidden_size)
        if copy_source_to_target is not None:
            self.copy = PointerGenerator(context_size=memory_size, state_size=hidden_size, input_size=embed_size,
                                         source_to_target=copy_source_to_target, target_size=vocab_size,
                                         unk_id=unk_id)

    def _step_features(self, prev_tokens: Tensor, state: DecoderState, enc: EncoderOutput) -> _StepFeatures:
        embedded = self._embed(prev_tokens)  # (batch, embed)
        query = state.rnn[0][-1]  # s_{t-1}: top layer's h (batch, hidden)
        context, weights = self._attend(query, enc, coverage=state.coverage)  # (batch, memory)
        s_t, rnn_state = self._step_rnn(torch.cat([embedded, context], dim=-1), state.rnn)  # (batch, hidden)
        readout = torch.tanh(self.readout(torch.cat([s_t, context, embedded], dim=-1)))  # (batch, hidden)
        covered = self._covered(state.coverage, weights)
        return _StepFeatures(readout, DecoderState.of(rnn_state, coverage=covered), weights,
                             self._copy_input(context, s_t, embedded))


class PlainDecoder(RNNDecoder):
    """The encoder-decoder without attention (Cho et al. 2014): the encoder's final top-layer state
    is the one summary c of the source, fed with y_{t-1} into every step; logits = W s_t."""

    has_attention = False

    def __init__(self, *, vocab_size: int, embed_size: int, hidden_size: int, memory_size: int,
                 num_layers: int = 1, rnn: RNNKind = "lstm", dropout: float = 0.0, pad_id: int = 0) -> None:
        super().__init__(vocab_size=vocab_size, embed_size=embed_size, hidden_size=hidden_size,
                         rnn_input_size=embed_size + memory_size, num_layers=num_layers, rnn=rnn,
                         dropout=dropout, pad_id=pad_id, generator_input=hidden_size)

    def project_keys(self, states: Tensor) -> None:
        return None

    @staticmethod
    def _summary(enc: EncoderOutput) -> Tensor:
        return enc.final[0][-1]  # (batch, memory): the top layer's final h

    def _step_features(self, prev_tokens: Tensor, state: DecoderState, enc: EncoderOutput) -> _StepFeatures:
        inputs = torch.cat([self._embed(prev_tokens), self._summary(enc)], dim=-1)
        s_t, rnn_state = self._step_rnn(inputs, state.rnn)  # (batch, hidden)
        return _StepFeatures(s_t, DecoderState.of(rnn_state), None, None)

    def forward_features(self, tgt_in: Tensor, state: DecoderState, enc: EncoderOutput, *,
                         need_attention: bool = True) -> DecoderFeatures:
        embedded = self.dropout(self.embedding(tgt_in))  # (batch, tgt_len, embed)
        summary = self._summary(enc).unsqueeze(1).expand(-1, tgt_in.size(1), -1)  # (batch, tgt_len, memory)
        outputs, _ = self._run_rnn(torch.cat([embedded, summary], dim=-1), state.rnn)
        return DecoderFeatures(self.dropout(outputs), None)
