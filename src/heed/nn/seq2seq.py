"""The encoder-decoder: encode once, then decode teacher-forced (training) or step by step (search)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

from torch import Tensor, nn

from heed.nn.decoder import DecoderFeatures, DecoderState, DecoderStep, _RNNDecoder
from heed.nn.encoder import Bridge, EncoderOutput, RNNEncoder
from heed.runtime import compile_function

# Target lengths the compiled teacher-forced pass is specialised for (each a compile of 10-30 s);
# batches of further lengths run the eager pass. The dates task has one; a corpus has dozens.
COMPILED_TARGET_LENGTHS = 8


class Seq2SeqOutput(NamedTuple):
    logits: Tensor  # (batch, tgt_len, vocab)
    attention: Tensor | None  # (batch, tgt_len, src_len); None without attention or when not asked for


class Seq2Seq(nn.Module):
    """Encoder + bridge + decoder. Search talks to it through `encode`, `init_state`, `step`
    and `DecoderState.select`, never through the decoder's class."""

    def __init__(self, encoder: RNNEncoder, bridge: Bridge, decoder: _RNNDecoder, *,
                 pad_id: int = 0, bos_id: int = 1, eos_id: int = 2) -> None:
        super().__init__()
        self.encoder = encoder
        self.bridge = bridge
        self.decoder = decoder
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id

    @property
    def has_attention(self) -> bool:
        return self.decoder.has_attention

    def encode(self, src: Tensor, src_lengths: Tensor) -> EncoderOutput:
        """src (batch, src_len), src_lengths (batch,) -> EncoderOutput with the attention keys
        projected once for the whole decode."""
        enc = self.encoder(src, src_lengths)
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

    def forward_features(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, *,
                         need_attention: bool = False) -> DecoderFeatures:
        """`forward` up to the generator's input: features (batch, tgt_len, generator_input),
        dropout applied. The trainer turns them into the loss with heed.nn.loss.generator_loss
        (through `self.decoder.generator`), which never materialises the logits."""
        enc = self.encode(src, src_lengths)
        return self.decoder.forward_features(tgt_in, self.init_state(enc), enc, need_attention=need_attention)

    def compiled_forward_features(self) -> Callable[..., DecoderFeatures]:
        """`forward_features` with the decoder's teacher-forced pass under torch.compile (inductor):
        the step loop, the bridge and the attention become one graph, forward and backward, with
        the element-wise work of every step fused into a few C++ kernels. The encoder stays eager:
        it makes one oneDNN RNN call per source length (heed.nn.encoder), chosen on the host.

        Batch and source lengths are dynamic; each target length compiles once, for the first
        COMPILED_TARGET_LENGTHS lengths met, and batches of other lengths run the eager pass. The
        module itself is not wrapped, so its state_dict keys stay those of the eager model."""
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

        return forward_features

    def _decoder_features(self, tgt_in: Tensor, enc: EncoderOutput, need_attention: bool) -> DecoderFeatures:
        return self.decoder.forward_features(tgt_in, self.init_state(enc), enc, need_attention=need_attention)
