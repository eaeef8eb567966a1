"""The model contract, written once: what search, the translator and server, training and export
need of a model family. A family (heed.nn.rnn, heed.nn.transformer) is a folder under heed/nn with
one builder registered in heed.nn.build; everything outside heed/nn talks to these protocols only.

    search         encode -> Encoded; init_state -> a state; step -> Step; state.select, enc.repeat/select
    translator     + has_attention, parameters, a teacher-forced __call__ (forced decoding, explorer,
                   alignments), for_decoding (the step's weight layout); to_int8 for int8
                   decoding on the CPU (Int8Model, heed.nn.int8), where a family has it
    training       + loss, compile_teacher_forced
    export         + family, and the family's graphs (heed.export)
    own search     a runtime that searches itself (a CTranslate2 export): heed.search.OwnSearchModel,
                   beside the search whose result it gives

A decoder state is a `TensorState`: named tensors, each with its declared batch (row) axis, so beam
reordering, ensembles and the exported step graph's inputs and outputs handle any family's state
without knowing its fields.

To a type checker, a model's protocols take the types of its own encoded batch and state
(`SearchModel[EncodedT, StateT]`): a family's `init_state` and `step` take only what its own `encode`
and `init_state` return. Code that serves any family (search, the translator, training) names the
protocol bare, which leaves both open. A PyTorch model (`TorchModel`) also declares the
torch.nn.Module methods heed calls on it, as a protocol cannot say "is an nn.Module".
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar, runtime_checkable

import torch
from torch import Tensor, nn

from heed.nn.loss import SeqLoss, TargetBatch

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11


class Encoded(Protocol):
    """An encoded batch of sources, as search needs it."""

    @property
    def mask(self) -> Tensor:
        """bool (batch, src_len), True = real token."""
        ...

    def repeat(self, times: int) -> Encoded:
        """Each source serving `times` decoder rows in a row (one per beam or sample)."""
        ...

    def select(self, sources: Tensor) -> Encoded:
        """Sources `sources` (n,) long, with all their decoder rows."""
        ...


class SearchState(Protocol):
    """A decoder's state for a batch of rows."""

    def select(self, indices: Tensor) -> SearchState:
        """Rows `indices` (n,) long, in that order (beams reordered, finished rows dropped)."""
        ...


class Step(Protocol):
    """One decoding step's output: logits (rows, vocab), which search log-softmaxes; the state for
    the next step; attention (rows, src_len), the weights behind the step, or None for a model
    without attention."""

    @property
    def logits(self) -> Tensor: ...

    @property
    def state(self) -> SearchState: ...

    @property
    def attention(self) -> Tensor | None: ...


EncodedT = TypeVar("EncodedT", bound=Encoded)  # a model's own encoded batch
StateT = TypeVar("StateT", bound=SearchState)  # a model's own decoder state


@runtime_checkable
class SearchModel(Protocol[EncodedT, StateT]):
    """What greedy search, beam search and sampling need of a model. Put it in eval mode first.
    `enc` and `state` are what this model's own `encode` and `init_state`/`step` returned."""

    pad_id: int
    bos_id: int  # the decoder's first input
    eos_id: int
    unk_id: int

    def encode(self, src: Tensor, src_lengths: Tensor) -> EncodedT:
        """src (batch, src_len) ids + EOS right-padded, src_lengths (batch,) -> the encoded batch."""
        ...

    def init_state(self, enc: EncodedT) -> StateT:
        """The first state for the encoded batch, one row per decoder row."""
        ...

    def step(self, prev_tokens: Tensor, state: StateT, enc: EncodedT) -> Step:
        """prev_tokens (rows,) long, the state, the encoded batch -> the step's output."""
        ...


class StepFeatures(Protocol):
    """A decoding step up to the output layer: features (rows, d) its input, the next state, the
    attention (rows, src_len) or None."""

    @property
    def features(self) -> Tensor: ...

    @property
    def state(self) -> SearchState: ...

    @property
    def attention(self) -> Tensor | None: ...


@runtime_checkable
class ShortlistModel(SearchModel[EncodedT, StateT], Protocol[EncodedT, StateT]):
    """A model whose step can stop before its output layer, so that search multiplies only a
    shortlist's rows of it (the Transformer family)."""

    def step_features(self, prev_tokens: Tensor, state: StateT, enc: EncodedT) -> StepFeatures:
        """prev_tokens (rows,) -> the step up to the output layer."""
        ...

    def output_rows(self, ids: Tensor) -> Callable[[Tensor], Tensor]:
        """The output layer restricted to its rows `ids` (n,) long, gathered once: features (rows, d)
        -> logits (rows, n), features W[ids]^T + b[ids]."""
        ...


@runtime_checkable
class Int8Model(Protocol):
    """A model that can run its matrix products in dynamic int8 on the CPU (heed.nn.int8): both of
    heed's families. `reduce_range`: activations in 7 bits, for x86 CPUs whose int8 sums saturate."""

    def to_int8(self, *, reduce_range: bool) -> None:
        """Replace, in place, the products it decodes with by int8 ones; the model then only decodes."""
        ...


class Seq2SeqOutput(NamedTuple):
    """A teacher-forced pass."""

    logits: Tensor  # (batch, tgt_len, vocab); a copy model's: log-probabilities (batch, tgt_len, vocab + temporary ids)
    attention: Tensor | None  # (batch, tgt_len, src_len); None without attention or when not asked for


@runtime_checkable
class TranslationModel(SearchModel[EncodedT, StateT], Protocol[EncodedT, StateT]):
    """What heed.api.Translator, the server and the explorer need besides search (an ensemble and an
    exported model are ones too)."""

    @property
    def has_attention(self) -> bool: ...

    def num_parameters(self) -> int:
        """How many numbers the model holds (an ensemble: all its members'; an export: the model it
        was exported from), for the model info and the logs."""
        ...

    def __call__(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, *,
                 need_attention: bool = True) -> Seq2SeqOutput:
        """Teacher-forced: tgt_in (batch, tgt_len) starting with BOS -> logits (batch, tgt_len, vocab)
        and the attention behind each position (batch, tgt_len, src_len), the same numbers as
        step by step."""
        ...


@runtime_checkable
class TorchModel(Protocol):
    """A PyTorch model (a torch.nn.Module), as far as heed calls the Module's own methods on one:
    moving it, switching train and eval mode, and reading and writing its weights."""

    def to(self, device: torch.device | str) -> Self: ...

    def train(self, mode: bool = True) -> Self: ...

    def eval(self) -> Self: ...

    def float(self) -> Self: ...

    def cpu(self) -> Self: ...

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]:
        """Its weights, for the optimizer."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """{name: tensor} of its weights and buffers, as a model directory saves them."""
        ...

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """Its weights and buffers from `state_dict` (what torch returns: the keys that did not fit)."""
        ...


@runtime_checkable
class HeadsModel(TorchModel, Protocol):
    """A model whose attention over the source can be read head by head (both PyTorch families;
    not an ensemble or an exported model): what `heed align --layer/--head/--sweep` needs."""

    alignment_layer: int  # the decoder layer whose head-mean attention __call__ and step report

    @property
    def measured_reading(self) -> MeasuredReading:
        """How heed align reads it when training recorded no reading."""
        ...

    @property
    def head_grid(self) -> tuple[int, int]:
        """(decoder layers with attention, heads per layer): the first two sizes of attention_heads."""
        ...

    def attention_heads(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced: every decoder layer's every head's attention over the source,
        (layers, heads, batch, tgt_len, src_len); an RNN's one attention is (1, 1, ...)."""
        ...

    def loss(self, batch: TargetBatch, *, label_smoothing: float = 0.0, attention_layer: int | None = None) -> SeqLoss:
        """The training loss (TrainableModel.loss); with `attention_layer`, that layer's every head's
        attention of the same pass in SeqLoss.attention (batch, heads, tgt_len, src_len): what
        guided alignment training supervises."""
        ...


@runtime_checkable
class AlignmentLayerModel(Protocol):
    """A model with an alignment layer (model.alignment_layer: true, a Transformer; Garg et al. 2019's
    full-context alignment): an attention over the source that reads the whole target, trained by
    guided alignment and used only to align."""

    def alignment_heads(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced: the alignment layer's every head over the source, (1, heads, batch,
        tgt_len, src_len), row t for target token t, as one layer of attention_heads."""
        ...


class MeasuredReading(NamedTuple):
    """The alignment reading measured best for a kind of model on gold by construction
    (docs/look-inside.md, section 8; bench/studies/alignment_readings.py): what `heed align` reads when
    training recorded no reading of its own. Fields as heed.json's "alignment" records a reading."""

    kind: str  # the kind of model it was measured on, for messages ("a pre-norm Transformer")
    method: str  # "argmax" or "shift"
    layer: int | str | None  # a decoder layer, "mean", or None (the model's alignment layer)
    weights: str  # "attention", "value_norm", "rollout" or "alti"


@runtime_checkable
class ValueNormModel(Protocol):
    """A model whose attention can be weighed by what each source position adds (Kobayashi et al.
    2020): the Transformer, whose heads each project their values through their slice of W_o."""

    def value_norms(self, src: Tensor, src_lengths: Tensor) -> Tensor:
        """(layers, heads, batch, src_len): the norm of each source position's value vector after
        each decoder layer's each head's output projection; it scales attention_heads' weights."""
        ...

    def value_weighted_heads(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        """(layers, heads, batch, tgt_len, src_len): attention_heads' weights times value_norms'
        norms, from one encoding of the source (the two apart encode it twice)."""
        ...


class AttentionBlock(NamedTuple):
    """One attention sublayer of a teacher-forced pass, in the terms its output is a sum of
    (Kobayashi et al. 2020; Ferrando et al. 2022, ALTI): for query position i,

        pre-norm   output_i = residual_i + sum_h sum_j weights[h, i, j] values[h, j] + bias
        post-norm  output_i = norm(residual_i + sum_h sum_j weights[h, i, j] values[h, j] + bias)

    part:     "encoder" (source self-attention), "decoder" (causal target self-attention) or
              "cross" (target over source); layer: its 0-based layer in its stack
    weights:  (batch, heads, q_len, k_len) every head's attention
    values:   (batch, heads, k_len, dim) f_h(x_j): key j's value vector through head h's
              slice of W_o, the value bias included
    bias:     (dim,) W_o's bias
    residual: (batch, q_len, dim) the stream the sublayer's output is added to
    norm:     the LayerNorm after the sum (post-norm), None for pre-norm
    output:   (batch, q_len, dim) the stream after the block
    """

    part: str
    layer: int
    weights: Tensor
    values: Tensor
    bias: Tensor
    residual: Tensor
    norm: nn.LayerNorm | None
    output: Tensor


@runtime_checkable
class ContributionModel(Protocol):
    """A model whose every attention sublayer can be decomposed into what each token adds (the
    Transformer): what attention rollout, ALTI+ and the logit lens read (heed.explain.contributions,
    heed.explain.logit_lens)."""

    def attention_blocks(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor,
                         visit: Callable[[AttentionBlock], None]) -> None:
        """Teacher-forced: `visit` every attention sublayer in the order the pass runs them (every
        encoder layer, then each decoder layer's self-attention and cross-attention), one at a time
        (a block's tensors need not outlive the call)."""
        ...

    def decoder_states(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced: the stream after each decoder layer, (layers, batch, tgt_len, dim)."""
        ...

    def read_out(self, states: Tensor) -> Tensor:
        """(..., dim) decoder stream -> (..., vocab) logits, as the last layer's stream is read
        (the final LayerNorm of a pre-norm stack, then the output layer)."""
        ...


class AttentionMaps(NamedTuple):
    """Every head of every layer of a teacher-forced pass."""

    encoder: Tensor  # (layers, batch, heads, src_len, src_len) encoder self-attention
    decoder: Tensor  # (layers, batch, heads, tgt_len, tgt_len) decoder self-attention (causal)
    cross: Tensor  # (layers, batch, heads, tgt_len, src_len) attention over the source


@runtime_checkable
class SelfAttentionModel(Protocol):
    """A model with self-attention (the Transformer): its every map, for the explorer's grid."""

    def attention_maps(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> AttentionMaps:
        ...


@runtime_checkable
class AttributableModel(Protocol):
    """A model whose token embeddings attribution can replace (both PyTorch families; not an
    ensemble or an exported model): what `heed attribute` needs besides the teacher-forced pass."""

    def token_embeddings(self) -> tuple[nn.Embedding, nn.Embedding]:
        """(source table, target table): the modules that turn ids into the vectors attribution
        scores; the same module twice when the model shares one table (read for the source first)."""
        ...


@runtime_checkable
class TrainableModel(TranslationModel[EncodedT, StateT], TorchModel, Protocol[EncodedT, StateT]):
    """A family's PyTorch model: what training, checkpoints and export need as well."""

    family: str

    def loss(self, batch: TargetBatch, *, label_smoothing: float = 0.0) -> SeqLoss:
        """The teacher-forced loss of `batch`, summed over its real target tokens."""
        ...

    def compile_teacher_forced(self) -> None:
        """From now on, run the training pass under torch.compile (`train.compile`)."""
        ...

    def for_decoding(self) -> None:
        """Lay out the decoder's weights for the few rows a decoding step multiplies (heed.nn.layout)."""
        ...


@dataclass(frozen=True)
class TensorState:
    """A decoder state as named tensors, each with its batch (row) axis: `select` reorders any
    family's state, and an exported step graph takes and returns it by name.

    tensors:    {name: tensor}, every tensor with `rows` along its batch axis
    batch_axes: {name: axis}, the axis of each tensor that indexes decoder rows (a family may
                name more than one state holds, e.g. an RNN's c only for an LSTM)
    """

    tensors: Mapping[str, Tensor]
    batch_axes: Mapping[str, int]

    def __getitem__(self, name: str) -> Tensor:
        return self.tensors[name]

    def select(self, indices: Tensor) -> TensorState:
        """Rows `indices` (n,) long of every tensor, in that order."""
        return type(self)({name: t.index_select(self.batch_axes[name], indices) for name, t in self.tensors.items()},
                          self.batch_axes)

    def replaced(self, tensors: Mapping[str, Tensor]) -> TensorState:
        """The same kind of state holding `tensors` (a step's new values, by the same names)."""
        return type(self)(tensors, self.batch_axes)



ModelT_contra = TypeVar("ModelT_contra", bound=TrainableModel, contravariant=True)  # the family's own model


class FamilyGraphs(Protocol[ModelT_contra, EncodedT]):
    """A family's export contract for one model config (heed.export): the graphs it exports, the
    modules to trace for them, and the runtime's side, how ONNX Runtime's outputs become the encoded
    batch and the state search steps (heed.export.ort.OrtSeq2Seq). heed.nn.rnn.onnx.RNNGraphs and
    heed.nn.transformer.onnx.TransformerGraphs implement it, each for its own family's model and
    encoded batch."""

    has_attention: bool

    def names(self) -> dict[str, tuple[list[str], list[str]]]:
        """{graph role ("encoder", "step"): (its input names, its output names)}."""
        ...

    def modules(self, model: ModelT_contra) -> dict[str, tuple[nn.Module, tuple[Tensor, ...],
                                                                dict[str, dict[int, str]]]]:
        """{graph role: (the module to trace, example inputs, dynamic axes by name)}."""
        ...

    def check_source(self, src: Tensor) -> None:
        """Raise a HeedError for a source (batch, src_len) the traced graphs cannot read."""
        ...

    def encoded(self, named: dict[str, Tensor], src: Tensor, src_lengths: Tensor) -> EncodedT:
        """The encoder graph's outputs by name -> the family's encoded batch."""
        ...

    def init_state(self, enc: EncodedT) -> SearchState:
        """The decoder's first state for the encoded batch."""
        ...

    def source_feeds(self, enc: EncodedT) -> dict[str, Tensor]:
        """The step graph's per-source inputs, by name."""
        ...

__all__ = [
    "AlignmentLayerModel",
    "AttentionMaps",
    "AttributableModel",
    "Encoded",
    "FamilyGraphs",
    "HeadsModel",
    "SearchModel",
    "SearchState",
    "SelfAttentionModel",
    "Seq2SeqOutput",
    "Step",
    "TensorState",
    "TorchModel",
    "TrainableModel",
    "TranslationModel",
    "ValueNormModel",
]
