"""The scratch attention seq2seq equals its PyTorch twin (weights copied by the bridge, float64):
same loss, same gradient for every parameter, same greedy output; and the bridge round-trips."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from heed.nn.build import ModelConfig, build_model
from heed.scratch import AttentionSeq2seq
from heed.scratch.bridge import (
    BridgeError,
    load_from_torch,
    scratch_to_torch,
    torch_to_scratch,
)
from heed.scratch.gradcheck import rel_error

SRC_VOCAB, TGT_VOCAB, E, H = 13, 11, 5, 6
PAD, BOS, EOS = 0, 1, 2


def batch(rng: np.random.Generator):
    """Padded sources of lengths 7, 3, 5, 1, 0 and padded targets of lengths 6, 2, 4, 3, 1."""
    src_lengths = np.array([7, 3, 5, 1, 0])
    tgt_lengths = np.array([6, 2, 4, 3, 1])
    n, S, T = len(src_lengths), src_lengths.max(), tgt_lengths.max() + 1
    src = rng.integers(3, SRC_VOCAB, (n, S))
    src[np.arange(S)[None, :] >= src_lengths[:, None]] = PAD
    tgt_in = np.zeros((n, T), np.int64)
    tgt_out = np.zeros((n, T), np.int64)
    for b, length in enumerate(tgt_lengths):
        target = rng.integers(3, TGT_VOCAB, length)
        tgt_in[b, 0], tgt_in[b, 1:length + 1] = BOS, target
        tgt_out[b, :length], tgt_out[b, length] = target, EOS
    return src, src_lengths, tgt_in, tgt_out


def torch_twin(score: str) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = ModelConfig(decoder="luong", input_feeding=False, attention=score, bidirectional=False, bridge="copy",
                      encoder_layers=1, decoder_layers=1, dropout=0.0, rnn="lstm", embed_size=E, hidden_size=H)
    return build_model(cfg, src_vocab_size=SRC_VOCAB, tgt_vocab_size=TGT_VOCAB).double()


def torch_grads(model: torch.nn.Module) -> dict[str, np.ndarray]:
    return {name: p.grad.numpy() for name, p in model.named_parameters()}


def as_torch_name(name: str) -> str:
    """scratch's summed LSTM bias has the gradient of each of torch's two biases."""
    return name.replace("rnn.bias", "rnn.bias_ih_l0")


@pytest.mark.parametrize("score", ["dot", "general", "additive"])
def test_scratch_loss_and_every_gradient_equal_torch_autograd(score):
    src, src_lengths, tgt_in, tgt_out = batch(np.random.default_rng(1))
    twin = torch_twin(score)
    model = torch_to_scratch(twin, dtype=np.float64)

    loss = model.forward(src, src_lengths, tgt_in, tgt_out)
    model.backward()
    out = twin(torch.from_numpy(src), torch.from_numpy(src_lengths), torch.from_numpy(tgt_in))
    twin_loss = F.cross_entropy(out.logits.reshape(-1, TGT_VOCAB), torch.from_numpy(tgt_out).reshape(-1),
                                ignore_index=PAD)
    twin_loss.backward()

    assert np.isfinite(loss)
    assert abs(loss - twin_loss.item()) <= 1e-12 * abs(loss)
    expected = torch_grads(twin)
    errors = {name: rel_error(grad, expected[as_torch_name(name)]) for name, grad in model.named_grads().items()}
    assert max(errors.values()) <= 1e-6, errors
    # Both halves of torch's LSTM bias get the gradient scratch's summed bias gets.
    for side in ("encoder", "decoder"):
        assert rel_error(model.named_grads()[f"{side}.rnn.bias"], expected[f"{side}.rnn.bias_hh_l0"]) <= 1e-6
    np.testing.assert_allclose(model.decoder.attention.weights, out.attention.detach().numpy(), rtol=0, atol=1e-13)


@pytest.mark.parametrize("score", ["dot", "general", "additive"])
def test_greedy_generate_equals_torch_step_by_step(score):
    src, src_lengths, _, _ = batch(np.random.default_rng(2))
    twin = torch_twin(score)
    model = torch_to_scratch(twin)
    generated = model.generate(src, src_lengths, max_len=6)

    with torch.no_grad():
        enc = twin.encode(torch.from_numpy(src), torch.from_numpy(src_lengths))
        state = twin.init_state(enc)
        prev = torch.full((len(src),), BOS)
        for t in range(generated.tokens.shape[1]):
            step = twin.step(prev, state, enc)
            prev, state = step.logits.argmax(-1), step.state
            alive = ~np.isin(generated.tokens[:, :t], [EOS]).any(axis=1)  # rows still decoding
            np.testing.assert_array_equal(generated.tokens[alive, t], prev.numpy()[alive])
            np.testing.assert_allclose(generated.attention[alive, t], step.attention.numpy()[alive], atol=1e-12)


def test_step_by_step_logits_equal_the_teacher_forced_pass():
    src, src_lengths, tgt_in, _ = batch(np.random.default_rng(3))
    model = AttentionSeq2seq(SRC_VOCAB, TGT_VOCAB, embed_size=E, hidden_size=H, score="general",
                             dtype=np.float64, rng=4)
    forced = model.logits(src, src_lengths, tgt_in)
    states, keys, src_mask = model._encode(src, src_lengths)
    h, c = model.encoder.final
    for t in range(tgt_in.shape[1]):
        logits, h, c, _ = model.decoder.step(tgt_in[:, t], h, c, states, keys, src_mask)
        np.testing.assert_allclose(logits, forced[:, t], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("score", ["dot", "general", "additive"])
def test_bridge_round_trip_torch_scratch_torch_is_identical(score):
    twin = torch_twin(score)
    before = {k: v.clone() for k, v in twin.state_dict().items()}
    for dtype in (np.float64, np.float32):
        model = torch_to_scratch(twin, dtype=dtype)
        scratch_to_torch(model, twin)
        for name, tensor in twin.state_dict().items():
            assert torch.equal(tensor, before[name]), name


def test_scratch_to_new_torch_model_computes_the_same_logits():
    src, src_lengths, tgt_in, _ = batch(np.random.default_rng(5))
    model = AttentionSeq2seq(SRC_VOCAB, TGT_VOCAB, embed_size=E, hidden_size=H, score="dot",
                             dtype=np.float64, rng=6)
    twin = scratch_to_torch(model)
    assert next(twin.parameters()).dtype == torch.float64
    with torch.no_grad():
        logits = twin(torch.from_numpy(src), torch.from_numpy(src_lengths), torch.from_numpy(tgt_in)).logits
    np.testing.assert_allclose(model.logits(src, src_lengths, tgt_in), logits.numpy(), rtol=1e-12, atol=1e-12)
    # and back: the same arrays
    again = torch_to_scratch(twin)
    for name, value in model.named_params().items():
        np.testing.assert_allclose(again.named_params()[name], value, rtol=0, atol=1e-15)


@pytest.mark.parametrize("change, message", [
    (dict(bidirectional=True), "unidirectional"),
    (dict(input_feeding=True), "input_feeding"),
    (dict(attention="scaled_dot"), "attention score"),
    (dict(attention_window=2), "window"),
    (dict(attention="additive", coverage=True), "coverage"),
    (dict(encoder_layers=2, decoder_layers=2), "1-layer"),
    (dict(bridge="linear"), "bridge"),
    (dict(rnn="gru"), "LSTM"),
])
def test_bridge_names_what_makes_a_torch_model_not_a_twin(change, message):
    cfg = dict(decoder="luong", input_feeding=False, attention="dot", bidirectional=False, bridge="copy",
               encoder_layers=1, decoder_layers=1, dropout=0.0, rnn="lstm", embed_size=E, hidden_size=H)
    cfg.update(change)
    other = build_model(ModelConfig(**cfg), src_vocab_size=SRC_VOCAB, tgt_vocab_size=TGT_VOCAB)
    with pytest.raises(BridgeError, match=message):
        torch_to_scratch(other)


def test_bridge_rejects_mismatched_sizes_and_scores():
    twin = torch_twin("dot")
    wrong_vocab = AttentionSeq2seq(SRC_VOCAB + 1, TGT_VOCAB, embed_size=E, hidden_size=H, score="dot")
    with pytest.raises(BridgeError, match=r"encoder.embedding.weight: torch shape \(13, 5\)"):
        load_from_torch(wrong_vocab, twin)
    wrong_score = AttentionSeq2seq(SRC_VOCAB, TGT_VOCAB, embed_size=E, hidden_size=H, score="general")
    with pytest.raises(BridgeError, match="score differs"):
        load_from_torch(wrong_score, twin)
