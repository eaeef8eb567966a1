"""An attention encoder-decoder in NumPy: the twin of heed's PyTorch model built with

    build_model(ModelConfig(decoder="luong", input_feeding=False, attention="dot", "general" or "additive",
                            bidirectional=False, bridge="copy", encoder_layers=1, decoder_layers=1,
                            rnn="lstm", dropout=0.0, embed_size=E, hidden_size=H), ...)

Same computation, same weight layout and names (`heed.scratch.bridge` copies weights across):

    encoder   states = LSTM(embed(src)), masked like torch's packed sequences     (batch, src_len, hidden)
    bridge    decoder (h0, c0) = encoder's final (h, c) ("copy")
    decoder   h_t = LSTM(embed(tgt_in)), tgt_in = BOS + target                   (batch, tgt_len, hidden)
              c_t = attend(h_t, keys, states, src_mask); keys = states (dot), states W_a^T (general)
                    or states W_k^T (additive: score v . tanh(W_q h_t + b_q + keys), Bahdanau et al. 2015, A.1.2)
              h~_t = tanh(W_c [h_t; c_t])   (Luong et al. 2015, eq. 5)
              logits = W_gen h~_t + b_gen   (Luong et al. 2015, eq. 6)
    loss      cross-entropy against tgt_out = target + EOS, mean over real tokens (padding id ignored)
"""
from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

from heed.scratch.attention import AdditiveAttention, Attention, TimeAttention
from heed.scratch.functions import lengths_to_mask
from heed.scratch.layers import (
    LSTM,
    SoftmaxWithLoss,
    Tanh,
    TimeAffine,
    TimeEmbedding,
    TimeLSTM,
)

SCORES = ("dot", "general", "additive")


class Generated(NamedTuple):
    """What greedy decoding returns."""

    tokens: np.ndarray  # (batch, steps) int: no BOS; EOS included; padding id after EOS
    attention: np.ndarray  # (batch, steps, src_len)


class _Weighted(Protocol):
    """A layer's weights and their gradients, as every layer of heed.scratch holds them."""

    params: list[np.ndarray]
    grads: list[np.ndarray]


class AttentionEncoder:
    """TimeEmbedding + one unidirectional TimeLSTM.

    src (batch, src_len) ids, run_mask bool (batch, src_len) the steps the LSTM runs
    -> states (batch, src_len, hidden), 0 under padding; `final` = (h, c), each (batch, hidden).
    """

    def __init__(self, embed_W: np.ndarray, Wx: np.ndarray, Wh: np.ndarray, b: np.ndarray,
                 *, pad_id: int = 0) -> None:
        self.embed = TimeEmbedding(embed_W, padding_idx=pad_id)
        self.lstm = TimeLSTM(Wx, Wh, b)
        self.params = self.embed.params + self.lstm.params
        self.grads = self.embed.grads + self.lstm.grads

    def forward(self, src: np.ndarray, run_mask: np.ndarray | None) -> np.ndarray:
        return self.lstm.forward(self.embed.forward(src), mask=run_mask)

    @property
    def final(self) -> tuple[np.ndarray, np.ndarray]:
        h, c = self.lstm.h, self.lstm.c
        assert h is not None and c is not None, "the encoder's final state is there after forward"
        return h, c

    def backward(self, dstates: np.ndarray, dh: np.ndarray, dc: np.ndarray) -> None:
        """dstates (batch, src_len, hidden); dh, dc (batch, hidden) the gradients of `final`."""
        self.embed.backward(self.lstm.backward(dstates, dh, dc))


class LuongDecoder:
    """Luong et al. 2015 attention decoder without input feeding (attention after the RNN).

    Teacher-forced: the LSTM runs over the whole tgt_in in one call, then one TimeAttention call
    attends for all steps. `step` is the same computation for one step (greedy search).
    """

    def __init__(self, embed_W: np.ndarray, Wx: np.ndarray, Wh: np.ndarray, b: np.ndarray,
                 W_c: np.ndarray, W_gen: np.ndarray, b_gen: np.ndarray, W_a: np.ndarray | None = None,
                 additive: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                 *, pad_id: int = 0) -> None:
        """W_a: the key projection, "general"'s W_a (hidden, hidden) or "additive"'s W_k (attn, hidden);
        additive: (W_q (attn, hidden), b_q (attn,), v (1, attn)) for the additive score, else None."""
        self.hidden_size = Wh.shape[1]
        self.embed = TimeEmbedding(embed_W, padding_idx=pad_id)
        self.lstm = TimeLSTM(Wx, Wh, b)
        self.key_proj = None if W_a is None else TimeAffine(W_a)  # W_a k or W_k k, no bias
        self.attention = TimeAttention() if additive is None else AdditiveAttention(*additive)
        self.combine = TimeAffine(W_c)  # W_c (hidden, 2 * hidden), no bias
        self.tanh = Tanh()
        self.generator = TimeAffine(W_gen, b_gen)
        layers: list[_Weighted] = [self.embed, self.lstm, self.combine, self.generator]
        if self.key_proj is not None:
            layers.insert(2, self.key_proj)
        if additive is not None:
            layers.insert(3, self.attention)
        self.params = [p for layer in layers for p in layer.params]
        self.grads = [g for layer in layers for g in layer.grads]
        # One-step layers over the same weight arrays, for step-by-step decoding.
        self.lstm_step = LSTM(Wx, Wh, b)
        self.attention_step = Attention() if additive is None else AdditiveAttention(*additive)

    def project_keys(self, states: np.ndarray) -> np.ndarray:
        """states (batch, src_len, hidden) -> keys (batch, src_len, hidden or attn), once per source."""
        return states if self.key_proj is None else self.key_proj.forward(states)

    def project_keys_backward(self, dkeys: np.ndarray) -> np.ndarray:
        """dkeys -> the part of dstates that flows through the key projection."""
        return dkeys if self.key_proj is None else self.key_proj.backward(dkeys)

    def forward(self, tgt_in: np.ndarray, h0: np.ndarray, c0: np.ndarray, states: np.ndarray,
                keys: np.ndarray, src_mask: np.ndarray) -> np.ndarray:
        """tgt_in (batch, tgt_len) -> logits (batch, tgt_len, vocab).

        No mask on the decoder LSTM: like torch, it also runs over target padding, whose outputs
        only reach positions the loss ignores.
        """
        hs = self.lstm.forward(self.embed.forward(tgt_in), h0, c0)  # (batch, tgt_len, hidden)
        contexts = self.attention.forward(hs, keys, states, src_mask)  # (batch, tgt_len, hidden)
        joined = np.concatenate([hs, contexts], axis=-1)  # (batch, tgt_len, 2 * hidden)
        h_tilde = self.tanh.forward(self.combine.forward(joined))  # Luong eq. 5
        return self.generator.forward(h_tilde)  # (batch, tgt_len, vocab)

    def backward(self, dlogits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """dlogits (batch, tgt_len, vocab) -> dvalues, dkeys (batch, src_len, hidden), dh0, dc0."""
        H = self.hidden_size
        djoined = self.combine.backward(self.tanh.backward(self.generator.backward(dlogits)))
        dqueries, dkeys, dvalues = self.attention.backward(djoined[..., H:])
        dhs = djoined[..., :H] + dqueries  # (batch, tgt_len, hidden)
        self.embed.backward(self.lstm.backward(dhs))
        dh0, dc0 = self.lstm.dh0, self.lstm.dc0
        assert dh0 is not None and dc0 is not None  # set by lstm.backward
        return dvalues, dkeys, dh0, dc0

    def step(self, prev_tokens: np.ndarray, h: np.ndarray, c: np.ndarray, states: np.ndarray,
             keys: np.ndarray, src_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """prev_tokens (batch,) -> logits (batch, vocab), h, c (batch, hidden), weights (batch, src_len)."""
        W_emb = self.embed.params[0]
        h, c = self.lstm_step.forward(W_emb[prev_tokens], h, c)
        context = self.attention_step.forward(h, keys, states, src_mask)  # (batch, hidden)
        h_tilde = np.tanh(np.concatenate([h, context], axis=-1) @ self.combine.params[0].T)
        W_gen, b_gen = self.generator.params
        weights = self.attention_step.weights
        assert weights is not None  # set by attention_step.forward
        return h_tilde @ W_gen.T + b_gen, h, c, weights


class AttentionSeq2seq:
    """Encoder + copy bridge + Luong decoder + loss, with `params`/`grads` over all of them.

    `names[k]` is the PyTorch twin's name for `params[k]`, except that each LSTM has one bias
    `*.rnn.bias` for torch's `bias_ih_l0 + bias_hh_l0`. Weights are initialised with torch's default
    distributions (embeddings N(0, 1) with a zero padding row, LSTM and Linear U(-1/sqrt(fan), ...)).
    `rng` is a numpy Generator or a seed. score: one of SCORES; attention_hidden: the additive
    score's size (None = hidden_size, as torch's Attention), only with score "additive".
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, *, embed_size: int, hidden_size: int,
                 score: str = "dot", attention_hidden: int | None = None, dtype: type = np.float32,
                 rng: np.random.Generator | int | None = None, pad_id: int = 0, bos_id: int = 1,
                 eos_id: int = 2) -> None:
        if score not in SCORES:
            raise ValueError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
        if attention_hidden is not None and score != "additive":
            raise ValueError(f"attention_hidden is the additive score's size; got it with score {score!r}")
        rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        self.embed_size, self.hidden_size, self.score = embed_size, hidden_size, score
        self.dtype = np.dtype(dtype)
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        E, H = embed_size, hidden_size
        # The additive score's hidden size, as torch's Attention: hidden_size unless given.
        A = attention_hidden or H
        self.attention_hidden = A if score == "additive" else None

        def uniform(shape: tuple[int, ...], fan_in: int) -> np.ndarray:
            bound = 1.0 / np.sqrt(fan_in)
            return rng.uniform(-bound, bound, shape).astype(self.dtype)

        def embedding(vocab: int) -> np.ndarray:
            W = rng.standard_normal((vocab, E)).astype(self.dtype)
            W[pad_id] = 0.0
            return W

        def lstm() -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # Wx, Wh, b = b_ih + b_hh
            return uniform((4 * H, E), H), uniform((4 * H, H), H), uniform((4 * H,), H) + uniform((4 * H,), H)

        self.encoder = AttentionEncoder(embedding(src_vocab_size), *lstm(), pad_id=pad_id)
        self.decoder = LuongDecoder(embedding(tgt_vocab_size), *lstm(), W_c=uniform((H, 2 * H), 2 * H),
                                    W_gen=uniform((tgt_vocab_size, H), H), b_gen=uniform((tgt_vocab_size,), H),
                                    W_a=uniform((H, H), H) if score == "general" else
                                    uniform((A, H), H) if score == "additive" else None,
                                    additive=(uniform((A, H), H), uniform((A,), H), uniform((1, A), A))
                                    if score == "additive" else None, pad_id=pad_id)
        self.loss_layer = SoftmaxWithLoss(ignore_index=pad_id)
        self.params = self.encoder.params + self.decoder.params
        self.grads = self.encoder.grads + self.decoder.grads
        rnn = ["rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias"]
        self.names = (["encoder.embedding.weight"] + [f"encoder.{n}" for n in rnn]
                      + ["decoder.embedding.weight"] + [f"decoder.{n}" for n in rnn]
                      + (["decoder.attention.key_proj.weight"] if score in ("general", "additive") else [])
                      + (["decoder.attention.query_proj.weight", "decoder.attention.query_proj.bias",
                          "decoder.attention.v.weight"] if score == "additive" else [])
                      + ["decoder.combine.weight", "decoder.generator.weight", "decoder.generator.bias"])
        assert len(self.names) == len(self.params)

    def named_params(self) -> dict[str, np.ndarray]:
        return dict(zip(self.names, self.params))

    def named_grads(self) -> dict[str, np.ndarray]:
        return dict(zip(self.names, self.grads))

    def _masks(self, src: np.ndarray, src_lengths: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """-> run_mask (the steps the encoder LSTM runs), src_mask (real tokens), bool (batch, src_len).

        Like torch's encoder, a row of length 0 still runs one step (pack needs length >= 1),
        but attends to nothing.
        """
        if src_lengths is None:
            src_lengths = (src != self.pad_id).sum(axis=1)
        src_lengths = np.asarray(src_lengths)
        src_len = src.shape[1]
        return lengths_to_mask(np.maximum(src_lengths, 1), src_len), lengths_to_mask(src_lengths, src_len)

    def _encode(self, src: np.ndarray, src_lengths: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        run_mask, src_mask = self._masks(src, src_lengths)
        states = self.encoder.forward(src, run_mask)  # (batch, src_len, hidden)
        return states, self.decoder.project_keys(states), src_mask

    def logits(self, src: np.ndarray, src_lengths: np.ndarray | None, tgt_in: np.ndarray) -> np.ndarray:
        """Teacher-forced logits (batch, tgt_len, vocab); caches what `backward` needs."""
        states, keys, src_mask = self._encode(src, src_lengths)
        h0, c0 = self.encoder.final  # bridge "copy"
        return self.decoder.forward(tgt_in, h0, c0, states, keys, src_mask)

    def forward(self, src: np.ndarray, src_lengths: np.ndarray | None, tgt_in: np.ndarray,
                tgt_out: np.ndarray) -> float:
        """src (batch, src_len), src_lengths (batch,) (None: count non-padding ids),
        tgt_in = BOS + target, tgt_out = target + EOS, both (batch, tgt_len) -> mean loss per real token."""
        return self.loss_layer.forward(self.logits(src, src_lengths, tgt_in), tgt_out)

    def backward(self, dout: float = 1.0) -> None:
        """Fill `grads` with the gradient of dout * loss."""
        dlogits = self.loss_layer.backward(dout)
        dvalues, dkeys, dh0, dc0 = self.decoder.backward(dlogits)
        dstates = dvalues + self.decoder.project_keys_backward(dkeys)
        self.encoder.backward(dstates, dh0, dc0)

    def generate(self, src: np.ndarray, src_lengths: np.ndarray | None = None, *, max_len: int = 50) -> Generated:
        """Greedy decoding of src (batch, src_len), at most max_len tokens (EOS included)."""
        states, keys, src_mask = self._encode(src, src_lengths)
        h, c = self.encoder.final
        batch = src.shape[0]
        prev = np.full(batch, self.bos_id, dtype=np.int64)
        done = np.zeros(batch, bool)
        tokens, attention = [], []
        for _ in range(max_len):
            logits, h, c, weights = self.decoder.step(prev, h, c, states, keys, src_mask)
            prev = np.where(done, self.pad_id, logits.argmax(axis=-1))
            tokens.append(prev)
            attention.append(np.where(done[:, None], 0.0, weights))
            done |= prev == self.eos_id
            if done.all():
                break
        return Generated(np.stack(tokens, axis=1), np.stack(attention, axis=1).astype(self.dtype))
