"""An exported model (heed.export.onnx) run by ONNX Runtime behind the search's protocol.

`OrtSeq2Seq` has what search asks of a model (encode, init_state, step, and `select` on what they
return, bos/eos/pad ids), so greedy search, beam search, sampling, n-best lists, prefixes and the
length and coverage penalties run unchanged over it; and a teacher-forced `__call__` (one step
at a time) for `Translator.align` and `explore`. It reuses the family's own encoded batch and
state (an RNN's EncoderOutput and DecoderState, a Transformer's TransformerEncoded and key/value
cache, both states heed.nn.protocol.TensorState): their `repeat`/`select` are index operations on
torch tensors that share memory with the numpy arrays onnxruntime reads and writes
(`torch.from_numpy`, `Tensor.numpy`), so nothing is copied at the boundary.

onnxruntime runs on the CPU here, with as many intra-op threads as torch has when a call is made
(`heed translate --threads N` sets both); a session per thread count is built on first use.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from heed.errors import ModelDirError
from heed.export.onnx import ENCODER_FILE, STEP_FILE, Manifest, check_graph_io, family_graphs, require
from heed.nn.protocol import Seq2SeqOutput, TensorState


class ExportedStep(NamedTuple):
    """One step of the step graph, as search reads it (heed.nn.protocol.Step)."""

    logits: Tensor  # (rows, vocab)
    state: TensorState  # the same names as the step's input state, one step on
    attention: Tensor | None  # (rows, src_len); None for a model without attention


class OrtSeq2Seq:
    """The two graphs of an exported directory behind `encode` / `init_state` / `step`, for any
    model family: the family's graphs object (heed.nn.build.Family.graphs, e.g. heed.nn.rnn.onnx.RNNGraphs)
    says how its encoded batch and state map onto the graphs' inputs and outputs, by name."""

    def __init__(self, manifest: Manifest) -> None:
        self._ort = require("onnxruntime")
        self.manifest = manifest
        ids = manifest.data["special_ids"]
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = (int(ids[name]) for name in ("pad", "bos", "eos", "unk"))
        self.family = manifest.model.family
        self.graphs = family_graphs(manifest.model)
        self.has_attention: bool = self.graphs.has_attention
        self._enc_outputs = manifest.graph(ENCODER_FILE)["outputs"]
        self._step_outputs = manifest.graph(STEP_FILE)["outputs"]
        self._sessions: dict[int, tuple[Any, Any]] = {}
        self._last_enc: Any = None  # _source_feeds' one-entry cache
        self._last_feeds: dict[str, Any] = {}
        self._session_pair()  # build now: load errors surface at load, and load time counts it

    # ------------------------------------------------------------------ what Translator expects

    def num_parameters(self) -> int:
        """The exported PyTorch model's, as its manifest recorded it."""
        return int(self.manifest.data.get("parameters", 0))

    @property
    def int8(self) -> bool:
        return self.manifest.int8

    def _session_pair(self) -> tuple[Any, Any]:
        """(encoder, step) sessions for torch's current thread count."""
        threads = torch.get_num_threads()
        pair = self._sessions.get(threads)
        if pair is None:
            ort = self._ort
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            directory = self.manifest.directory
            try:
                pair = tuple(ort.InferenceSession(str(directory / name), sess_options=options,
                                                  providers=["CPUExecutionProvider"])
                             for name in (ENCODER_FILE, STEP_FILE))
            except Exception as e:  # noqa: BLE001  # onnxruntime raises its own exception types for a bad graph
                raise ModelDirError(f"{directory}: onnxruntime cannot load the graphs ({str(e).splitlines()[0]}); "
                                    "export the model again with this heed") from None
            for name, session in zip((ENCODER_FILE, STEP_FILE), pair):
                check_graph_io(session, name, self.manifest)
            self._sessions[threads] = pair
        return pair

    # ------------------------------------------------------------------ the search's protocol

    def encode(self, src: Tensor, src_lengths: Tensor) -> Any:
        """src (batch, src_len), src_lengths (batch,) -> the family's encoded batch."""
        self.graphs.check_source(src)
        encoder, _ = self._session_pair()
        outs = encoder.run(None, {"src": _array(src.long()), "src_lengths": _array(src_lengths.long())})
        named = dict(zip(self._enc_outputs, (torch.from_numpy(x) for x in outs)))
        return self.graphs.encoded(named, src, src_lengths)

    def init_state(self, enc: Any) -> Any:
        return self.graphs.init_state(enc)

    def step(self, prev_tokens: Tensor, state: TensorState, enc: Any) -> ExportedStep:
        """prev_tokens (rows,) -> logits (rows, vocab), the next state, the attention (rows, src_len)
        or None. The state's tensors are the step graph's inputs by name, and `<name>_out` its
        outputs (heed.export.onnx): any family's state, without knowing its fields."""
        _, step = self._session_pair()
        feeds = dict(self._source_feeds(enc))
        feeds["prev_tokens"] = _array(prev_tokens)
        feeds.update({name: _array(t) for name, t in state.tensors.items()})
        outs = step.run(None, feeds)
        named = dict(zip(self._step_outputs, (torch.from_numpy(x) for x in outs)))
        return ExportedStep(named["logits"], state.replaced({name: named[f"{name}_out"] for name in state.tensors}),
                            named.get("attention"))

    def _source_feeds(self, enc: Any) -> dict[str, Any]:
        """The step graph's per-source inputs as numpy arrays, converted once per encoded batch
        (search passes the same one for step after step, and a new one only when it drops
        finished sentences)."""
        if self._last_enc is not enc:
            self._last_enc = enc
            self._last_feeds = {name: _array(t) for name, t in self.graphs.source_feeds(enc).items()}
        return self._last_feeds

    def __call__(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, *,
                 need_attention: bool = True) -> Seq2SeqOutput:
        """Teacher-forced, as a PyTorch model's forward, one step at a time: tgt_in (batch, tgt_len)
        starting with BOS -> logits (batch, tgt_len, vocab), attention (batch, tgt_len, src_len) or None."""
        enc = self.encode(src, src_lengths)
        state = self.init_state(enc)
        logits: list[Tensor] = []
        weights: list[Any] = []
        for t in range(tgt_in.size(1)):
            out = self.step(tgt_in[:, t], state, enc)
            state = out.state
            logits.append(out.logits)
            weights.append(out.attention)
        attention = torch.stack(weights, dim=1) if self.has_attention and need_attention else None
        return Seq2SeqOutput(torch.stack(logits, dim=1), attention)


def _array(t: Tensor) -> Any:
    """A CPU tensor as the numpy array onnxruntime reads (shared memory where it is contiguous).
    The search's tensors never need gradients (it runs under inference_mode or no_grad; outside
    them, `detach` keeps `numpy()` from refusing)."""
    if t.requires_grad:
        t = t.detach()
    return t.numpy() if t.is_contiguous() else t.contiguous().numpy()
