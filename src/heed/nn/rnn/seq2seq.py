"""The encoder-decoder: encode once, then decode teacher-forced (training) or step by step (search)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from torch import Tensor, nn

from heed.nn.int8 import quantize_linears
from heed.nn.layout import for_decoding
from heed.nn.loss import SeqLoss, TargetBatch, generator_loss
from heed.nn.protocol import MeasuredReading, Seq2SeqOutput
from heed.nn.rnn.copy import mixture_loss
from heed.nn.rnn.coverage import coverage_loss
from heed.nn.rnn.decoder import DecoderFeatures, DecoderState, DecoderStep, RNNDecoder
from heed.nn.rnn.encoder import Bridge, EncoderOutput, RNNEncoder
from heed.plumbing.runtime import compile_function

# Target lengths the compiled teacher-forced pass is specialised for (each a compile of 10-30 s);
# batches of further lengths run the eager pass. The dates task has one; a corpus has dozens.
COMPILED_TARGET_LENGTHS = 8


class Seq2Seq(nn.Module):
    """The RNN family's model (heed.nn.protocol.TrainableModel): encoder + bridge + decoder. Search talks to it through `encode`, `init_state`, `step`
    and `DecoderState.select`, never through the decoder's class.

    `coverage_loss`: lambda of See et al. 2017, eq. 13, the weight of the coverage loss in `loss`;
    needs a decoder with coverage (0 = no coverage loss)."""

    def __init__(self, encoder: RNNEncoder, bridge: Bridge, decoder: RNNDecoder, *,
                 pad_id: int = 0, bos_id: int = 1, eos_id: int = 2, unk_id: int = 3, coverage_loss: float = 0.0) -> None:
        super().__init__()
        if coverage_loss < 0 or (coverage_loss > 0 and not decoder.coverage):
            raise ValueError(f"coverage_loss {coverage_loss} needs to be >= 0, and > 0 only with a coverage decoder")
        self.encoder = encoder
        self.bridge = bridge
        self.decoder = decoder
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = pad_id, bos_id, eos_id, unk_id
        # the training-mode teacher-forced pass under torch.compile, once `compile_teacher_forced` ran
        self._compiled_features: Callable[..., DecoderFeatures] | None = None
        self.coverage_loss = coverage_loss

    family = "rnn"

    def for_decoding(self) -> None:
        """The decoder's matrices column-major for the step's few rows (heed.nn.layout)."""
        for_decoding(self.decoder)

    def to_int8(self, *, reduce_range: bool) -> None:
        """Every nn.Linear of encoder, bridge and decoder in dynamic int8 from now on (heed.nn.int8):
        the attention's projections, W_c, the readout and the generator. The LSTM/GRU cells stay
        float32 (PyTorch has no int8 kernel heed's step loop could call), and so do embeddings."""
        quantize_linears(self, reduce_range=reduce_range)

    @property
    def has_attention(self) -> bool:
        return self.decoder.has_attention

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def encode(self, src: Tensor, src_lengths: Tensor) -> EncoderOutput:
        """src (batch, src_len), src_lengths (batch,) -> EncoderOutput with the attention keys
        projected once for the whole decode. A copy model's src may name tokens past the source
        vocabulary (heed.data.extended): the encoder reads them as <unk>, the copy keeps them."""
        copy = self.decoder.copy
        enc = replace(self.encoder(src if copy is None else copy.encodable(src), src_lengths), src=src)
        return enc.with_keys(self.decoder.project_keys(enc.states))

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        return self.decoder.init_state(self.bridge(enc.final), enc)

    def step(self, prev_tokens: Tensor, state: DecoderState, enc: EncoderOutput) -> DecoderStep:
        """prev_tokens (batch,) -> DecoderStep(logits (batch, vocab), state, attention (batch, src_len))."""
        return self.decoder.step(prev_tokens, state, enc)

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, *,
                need_attention: bool = True) -> Seq2SeqOutput:
        """Teacher-forced: src (batch, src_len), tgt_in (batch, tgt_len) starting with BOS ->
        logits (batch, tgt_len, vocab), attention (batch, tgt_len, src_len).
        With need_attention=False the weights are not materialised where a fused kernel can skip them."""
        enc = self.encode(src, src_lengths)
        out = self.decoder(tgt_in, self.init_state(enc), enc, need_attention=need_attention)
        return Seq2SeqOutput(out.logits, out.attention)

    alignment_layer = 0  # the one attention (heed.nn.protocol.HeadsModel)

    @property
    def measured_reading(self) -> MeasuredReading:
        """The reading measured best on the dates task's gold (docs/look-inside.md, section 8): the
        attention at the step that predicts each token (argmax), with and without input feeding."""
        feeding = getattr(self.decoder, "input_feeding", False)
        return MeasuredReading(f"an RNN {'with' if feeding else 'without'} input feeding", "argmax", None, "attention")
    head_grid = (1, 1)

    def token_embeddings(self) -> tuple[nn.Embedding, nn.Embedding]:
        """(source, target) embedding tables (heed.nn.protocol.AttributableModel)."""
        return self.encoder.embedding, self.decoder.embedding

    def attention_heads(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        """The one attention as one layer of one head: (1, 1, batch, tgt_len, src_len)."""
        attention = self.forward(src, src_lengths, tgt_in).attention
        if attention is None:
            raise ValueError("this model has no attention")
        return attention[None, None]

    def forward_features(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, *,
                         need_attention: bool = False) -> DecoderFeatures:
        """`forward` up to the generator's input: features (batch, tgt_len, generator_input),
        dropout applied; `loss` turns them into the loss."""
        if self._compiled_features is not None and self.training:
            return self._compiled_features(src, src_lengths, tgt_in, need_attention=need_attention)
        enc = self.encode(src, src_lengths)
        return self.decoder.forward_features(tgt_in, self.init_state(enc), enc, need_attention=need_attention)

    def loss(self, batch: TargetBatch, *, label_smoothing: float = 0.0, attention_layer: int | None = None) -> SeqLoss:
        """The teacher-forced training loss of `batch`, summed over its target tokens (tgt_out !=
        pad_id): the cross-entropy, plus lambda times the coverage loss (See et al. 2017, eq. 13)
        when `coverage_loss` > 0. The generator and cross-entropy run through
        heed.nn.loss.generator_loss, which never materialises the logits; attention weights are
        kept only for the coverage loss, or with `attention_layer` (0, the one attention: returned
        as SeqLoss.attention (batch, 1, tgt_len, src_len), for guided alignment training). A copy
        model's is the NLL of See et al.'s mixture over the
        extended vocabulary (heed.nn.rnn.copy.mixture_loss); its tgt_out names a copied unknown word by
        its temporary id (heed.data.extended). Copy with coverage is See et al.'s full model: the
        mixture's NLL plus the same coverage term."""
        if attention_layer is not None and (attention_layer != 0 or not self.has_attention):
            raise ValueError(f"attention_layer {attention_layer}: this RNN has "
                             f"{'one attention, layer 0' if self.has_attention else 'no attention'}")
        weighted = self.coverage_loss > 0
        need_attention = weighted or attention_layer is not None
        if self.decoder.copy is not None:
            enc = self.encode(batch.src, batch.src_lengths)
            # a copy decoder returns the attention whatever need_attention says: its mixture needs it
            out = self.decoder(batch.tgt_in, self.init_state(enc), enc, need_attention=need_attention)
            cross_entropy = mixture_loss(out.logits, batch.tgt_out, ignore_index=self.pad_id,
                                         label_smoothing=label_smoothing, vocab_size=self.decoder.copy.target_size)
            attention = out.attention
        else:
            features = self.forward_features(batch.src, batch.src_lengths, batch.tgt_in, need_attention=need_attention)
            cross_entropy = generator_loss(features.features, self.decoder.generator, batch.tgt_out,
                                           ignore_index=self.pad_id, label_smoothing=label_smoothing)
            attention = features.attention
        heads = None if attention_layer is None else attention[:, None]
        if not weighted:
            return SeqLoss(cross_entropy, cross_entropy, None, heads)
        assert attention is not None
        coverage = self.coverage_loss * coverage_loss(attention, batch.tgt_out != self.pad_id)  # eq. 13
        return SeqLoss(cross_entropy + coverage.to(cross_entropy.dtype), cross_entropy, coverage, heads)

    def compile_teacher_forced(self) -> None:
        """From now on, `forward_features` in training mode (and so `loss`) runs the decoder's
        teacher-forced pass under torch.compile (inductor): the step loop, the bridge and the
        attention become one graph, forward and backward, with the element-wise work of every step
        fused into a few C++ kernels. The encoder stays eager: it makes one oneDNN RNN call per
        source length (heed.nn.rnn.encoder), chosen on the host. Evaluation mode stays eager.

        Batch and source lengths are dynamic; each target length compiles once, for the first
        COMPILED_TARGET_LENGTHS lengths met, and batches of other lengths run the eager pass. The
        module itself is not wrapped, so its state_dict keys stay those of the eager model. A copy
        model's loss reads the decoder's log-probabilities, not its features, and stays eager."""
        decoder_pass = compile_function(self._decoder_features)
        compiled_lengths: set[int] = set()

        def forward_features(src: Tensor, src_lengths: Tensor, tgt_in: Tensor, *,
                             need_attention: bool = False) -> DecoderFeatures:
            enc = self.encode(src, src_lengths)
            steps = tgt_in.size(1)
            if steps not in compiled_lengths and len(compiled_lengths) >= COMPILED_TARGET_LENGTHS:
                return self.decoder.forward_features(tgt_in, self.init_state(enc), enc, need_attention=need_attention)
            compiled_lengths.add(steps)
            # One layout and dtype whatever the batch, or each variant is a recompile: a batch of one
            # source length gives states of other strides, and under bf16 autocast the encoder's
            # final state is bf16 or float32 by the path it took (the fused eager pass casts too).
            dtype = self.decoder.generator.weight.dtype
            enc = replace(enc, states=enc.states.to(dtype).contiguous(),
                          final=tuple(t.to(dtype).contiguous() for t in enc.final),
                          keys=None if enc.keys is None else enc.keys.to(dtype).contiguous())
            return decoder_pass(tgt_in, enc, need_attention)

        self._compiled_features = forward_features

    def _decoder_features(self, tgt_in: Tensor, enc: EncoderOutput, need_attention: bool) -> DecoderFeatures:
        return self.decoder.forward_features(tgt_in, self.init_state(enc), enc, need_attention=need_attention)
