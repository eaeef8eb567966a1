"""The hand-written input-feeding pass (heed.nn.rnn.feeding) against autograd through the step loop."""
from __future__ import annotations

from functools import partial

import pytest
import torch

from heed.nn.build import ModelConfig, build_model
from heed.nn.rnn.decoder import DecoderOutput, RNNDecoder
from heed.nn.rnn.feeding import InputFeedingLSTM

SRC_LENGTHS = torch.tensor([7, 3, 5, 1])
SRC_LEN, TGT_LEN = 8, 6


def make_model(layers: int = 1, score: str = "general", dropout: float = 0.0):
    cfg = ModelConfig(decoder="luong", attention=score, input_feeding=True, embed_size=5, hidden_size=6,
                      encoder_layers=layers, decoder_layers=layers, bridge="copy", dropout=dropout)
    return build_model(cfg, src_vocab_size=11, tgt_vocab_size=9).double()


def batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 11, (4, SRC_LEN), generator=gen)
    src[torch.arange(SRC_LEN) >= SRC_LENGTHS[:, None]] = 0
    return src, torch.randint(3, 9, (4, TGT_LEN), generator=gen)


def run(model, fused: bool):
    """Logits, attention and every parameter's gradient of an arbitrary function of both."""
    src, tgt = batch()
    model.zero_grad()
    enc = model.encode(src, SRC_LENGTHS)
    state = model.init_state(enc)
    out = logits_of(model, fused, tgt, state, enc)
    (out.logits.sin().sum() + (out.attention * torch.arange(SRC_LEN)).sum()).backward()
    return out, {name: p.grad.clone() for name, p in model.named_parameters()}


def logits_of(model, fused: bool, tgt, state, enc) -> DecoderOutput:
    """The fused pass, or the step loop every decoder inherits (the reference), then the generator."""
    pass_ = model.decoder.forward_fused if fused else partial(RNNDecoder.forward_features, model.decoder)
    out = pass_(tgt, state, enc)
    return DecoderOutput(model.decoder.generator(out.features), out.attention)


@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("score", ["dot", "general", "scaled_dot"])
def test_fused_pass_equals_the_step_loop(layers, score):
    model = make_model(layers, score)
    (ref, ref_grads), (fused, fused_grads) = run(model, fused=False), run(model, fused=True)
    torch.testing.assert_close(fused.logits, ref.logits, rtol=0, atol=1e-12)
    torch.testing.assert_close(fused.attention, ref.attention, rtol=0, atol=1e-12)
    assert set(fused_grads) == set(ref_grads)
    for name, grad in ref_grads.items():
        assert grad.abs().sum() > 0 or name.startswith("encoder.embedding"), name
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-9, atol=1e-12, msg=name)


def test_the_model_takes_the_fused_pass_where_it_applies():
    assert make_model().decoder.fusable(torch.zeros(2, 3, dtype=torch.long))
    cosine = make_model(score="cosine")
    assert not cosine.decoder.fusable(torch.zeros(2, 3, dtype=torch.long))
    cfg = ModelConfig(decoder="luong", rnn="gru", embed_size=5, hidden_size=6)
    gru = build_model(cfg, src_vocab_size=11, tgt_vocab_size=9)
    assert not gru.decoder.fusable(torch.zeros(2, 3, dtype=torch.long))


def random_inputs(layers: int, *, all_padding_row: bool = False, drop: bool = False, seed: int = 0):
    """Inputs of InputFeedingLSTM.apply in float64; T=4, B=3, H=2, S=5, D=3."""
    gen = torch.Generator().manual_seed(seed)

    def r(*shape):
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * 0.7).requires_grad_()

    T, B, H, S, D = 4, 3, 2, 5, 3
    pad = torch.arange(S) >= torch.tensor([5, 2, 0 if all_padding_row else 4])[:, None]
    masks = None
    if drop:
        masks = (torch.rand(layers - 1, T, B, H, generator=gen) > 0.3).double() / 0.7
    layer_params = [r(4 * H, 2 * H)]
    for _ in range(1, layers):
        layer_params += [r(4 * H, 2 * H), r(4 * H)]
    return (r(T, B, 4 * H), r(layers, B, H), r(layers, B, H), r(B, H), r(B, S, H), r(B, S, D), pad, r(H, H + D),
            masks, 0.8, None, *layer_params)


@pytest.mark.parametrize("layers,drop", [(1, False), (2, False), (2, True), (3, True)])
def test_hand_written_backward_passes_gradcheck(layers, drop):
    inputs = random_inputs(layers, drop=drop)
    assert torch.autograd.gradcheck(lambda *x: InputFeedingLSTM.apply(*x), inputs, eps=1e-6, atol=1e-7)


def test_an_all_padding_row_gives_zero_weights_and_finite_gradients():
    inputs = random_inputs(1, all_padding_row=True)
    h_tilde, weights = InputFeedingLSTM.apply(*inputs)
    assert torch.isfinite(h_tilde).all()
    assert (weights[:, 2] == 0).all()  # the row with no real token
    torch.testing.assert_close(weights[:, :2].sum(-1), torch.ones(4, 2, dtype=torch.float64))
    (h_tilde.sum() + weights.sum()).backward()
    assert all(torch.isfinite(x.grad).all() for x in inputs if isinstance(x, torch.Tensor) and x.grad is not None)
    assert torch.autograd.gradcheck(lambda *x: InputFeedingLSTM.apply(*x), inputs, eps=1e-6, atol=1e-7)


def test_dropout_between_layers_is_sampled_in_training_and_off_in_eval():
    model = make_model(layers=2, dropout=0.5)
    src, tgt = batch()
    enc = model.encode(src, SRC_LENGTHS)
    state = model.init_state(enc)
    model.eval()
    ref = logits_of(model, False, tgt, state, enc).logits
    torch.testing.assert_close(logits_of(model, True, tgt, state, enc).logits, ref, rtol=0, atol=1e-12)
    model.train()
    torch.manual_seed(0)
    first = logits_of(model, True, tgt, state, enc).logits
    torch.manual_seed(1)
    assert not torch.allclose(logits_of(model, True, tgt, state, enc).logits, first)


@pytest.mark.cpu_bf16
def test_bf16_matrix_products_stay_close_to_float32():
    model = make_model(layers=2).float()
    src, tgt = batch()

    def grads(autocast: bool):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            enc = model.encode(src, SRC_LENGTHS)
            out = logits_of(model, True, tgt, model.init_state(enc), enc)
        out.logits.float().logsumexp(-1).sum().backward()
        return out.logits.float(), {n: p.grad.clone() for n, p in model.named_parameters()}

    (ref, ref_grads), (bf16, bf16_grads) = grads(False), grads(True)
    assert bf16_grads["decoder.rnn.weight_hh_l1"].dtype == torch.float32
    torch.testing.assert_close(bf16, ref, rtol=0.05, atol=0.05)
    for name, grad in ref_grads.items():
        scale = grad.abs().max().clamp(min=1e-3)
        assert (bf16_grads[name] - grad).abs().max() / scale < 0.1, name
