"""RNNEncoder (packed, so padding never touches a state) and Bridge."""
from __future__ import annotations

import pytest
import torch

from heed.nn.rnn.encoder import Bridge, EncoderOutput, RNNEncoder

VOCAB, EMBED, HIDDEN, PAD = 11, 5, 8, 0
LENGTHS = torch.tensor([4, 6, 2, 1])
SRC_LEN = 7  # longer than any sentence: the batch carries an extra column of padding

ENCODERS = [  # (rnn, bidirectional, num_layers)
    ("lstm", True, 1), ("lstm", False, 1), ("gru", True, 1), ("gru", False, 1),
    ("lstm", True, 2), ("gru", True, 3), ("lstm", False, 2),
]


def make_encoder(rnn: str, bidirectional: bool, num_layers: int) -> RNNEncoder:
    # Dropout > 0 to prove eval() really switches it off in the comparisons below.
    encoder = RNNEncoder(vocab_size=VOCAB, embed_size=EMBED, hidden_size=HIDDEN, num_layers=num_layers,
                         rnn=rnn, bidirectional=bidirectional, dropout=0.3, pad_id=PAD)
    return encoder.double().eval()


def make_batch(fill: int = PAD) -> torch.Tensor:
    """src (batch, SRC_LEN): real ids 1..VOCAB-1, then `fill` under padding."""
    src = torch.randint(1, VOCAB, (len(LENGTHS), SRC_LEN))
    padding = torch.arange(SRC_LEN) >= LENGTHS.unsqueeze(1)
    return src.masked_fill(padding, fill)


@pytest.mark.parametrize("rnn,bidirectional,num_layers", ENCODERS)
def test_a_sentence_encodes_the_same_alone_as_in_a_padded_batch(rnn: str, bidirectional: bool, num_layers: int) -> None:
    encoder = make_encoder(rnn, bidirectional, num_layers)
    src = make_batch()
    batch = encoder(src, LENGTHS)
    for b, n in enumerate(LENGTHS.tolist()):
        alone = encoder(src[b:b + 1, :n], LENGTHS[b:b + 1])  # no padding at all
        torch.testing.assert_close(batch.states[b, :n], alone.states[0], rtol=0, atol=1e-12)
        assert torch.equal(batch.states[b, n:], torch.zeros_like(batch.states[b, n:]))  # zero under padding
        for in_batch, by_itself in zip(batch.final, alone.final, strict=True):
            torch.testing.assert_close(in_batch[:, b], by_itself[:, 0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("rnn,bidirectional,num_layers", ENCODERS)
def test_tokens_under_padding_change_nothing(rnn: str, bidirectional: bool, num_layers: int) -> None:
    encoder = make_encoder(rnn, bidirectional, num_layers)
    src = make_batch()
    garbage = torch.where(src == PAD, torch.randint(1, VOCAB, src.shape), src)  # real ids where padding was
    a, b = encoder(src, LENGTHS), encoder(garbage, LENGTHS)
    assert torch.equal(a.states, b.states)
    for x, y in zip(a.final, b.final, strict=True):
        assert torch.equal(x, y)


@pytest.mark.parametrize("rnn,bidirectional,num_layers", ENCODERS)
def test_running_by_length_equals_packing_in_values_and_gradients(rnn: str, bidirectional: bool,
                                                                  num_layers: int) -> None:
    """The CPU fast path (one call per distinct length, no padding) against the packed call."""
    encoder = make_encoder(rnn, bidirectional, num_layers)
    embedded = torch.randn(len(LENGTHS), SRC_LEN, EMBED, dtype=torch.float64, requires_grad=True)
    distinct, counts = torch.unique(LENGTHS, return_counts=True)
    runs = {"by_length": lambda: encoder._run_by_length(embedded, LENGTHS, distinct.tolist(), counts.tolist()),
            "packed": lambda: encoder._run_packed(embedded, LENGTHS)}
    results = {}
    for name, run in runs.items():
        states, final = run()
        weights = torch.linspace(-1, 1, states.numel(), dtype=torch.float64).view_as(states)
        loss = (states * weights).sum() + sum((f * f).sum() for f in final)
        grads = torch.autograd.grad(loss, [embedded, *encoder.rnn.parameters()])
        results[name] = (states.detach(), [f.detach() for f in final], grads)
    (s1, f1, g1), (s2, f2, g2) = results["by_length"], results["packed"]
    torch.testing.assert_close(s1, s2, rtol=0, atol=1e-12)
    padding = torch.arange(SRC_LEN) >= LENGTHS.unsqueeze(1)
    assert torch.equal(s1[padding], torch.zeros_like(s1[padding]))  # zero under padding
    for a, b in zip(f1, f2, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


@pytest.mark.parametrize("rnn,lengths,grad,expected", [
    ("lstm", [4, 6, 2, 1], False, "by_length"),  # LSTM: up to 4 lengths, decoding or training
    ("lstm", [4, 6, 2, 1, 3], True, "packed"),
    ("gru", [4, 6, 2, 1], True, "by_length"),  # GRU: up to 4 lengths when training ...
    ("gru", [4, 6], False, "packed"),  # ... only one when not
    ("gru", [6, 6], False, "by_length"),
])
def test_the_encoder_runs_by_length_only_where_that_measured_faster(rnn: str, lengths: list[int], grad: bool,
                                                                     expected: str, monkeypatch) -> None:
    encoder = make_encoder(rnn, True, 1)
    used = []
    for name in ("by_length", "packed"):
        method = getattr(encoder, f"_run_{name}")
        monkeypatch.setattr(encoder, f"_run_{name}", lambda *a, _m=method, _n=name: used.append(_n) or _m(*a))
    src = torch.randint(1, VOCAB, (len(lengths), max(lengths)))
    with torch.set_grad_enabled(grad):
        encoder(src, torch.tensor(lengths))
    assert used == [expected]


@pytest.mark.parametrize("rnn,bidirectional,num_layers", ENCODERS)
def test_encoder_output_shapes(rnn: str, bidirectional: bool, num_layers: int) -> None:
    out = make_encoder(rnn, bidirectional, num_layers)(make_batch(), LENGTHS)
    batch = len(LENGTHS)
    assert out.states.shape == (batch, SRC_LEN, HIDDEN)  # directions concatenated: HIDDEN in all
    assert len(out.final) == (2 if rnn == "lstm" else 1)  # (h, c) or (h,)
    for t in out.final:
        assert t.shape == (num_layers, batch, HIDDEN)
    assert out.mask.dtype == torch.bool and out.mask.shape == (batch, SRC_LEN)
    assert out.mask.sum(dim=1).tolist() == LENGTHS.tolist()
    assert out.keys is None


@pytest.mark.parametrize("rnn,num_layers", [("lstm", 1), ("gru", 1), ("lstm", 2), ("gru", 3)])
def test_bidirectional_final_state_is_forward_then_backward_top_layer(rnn: str, num_layers: int) -> None:
    # The forward direction ends at the last real token, the backward one at the first; the final h
    # of the top layer is exactly those two output states, forward half first.
    out = make_encoder(rnn, True, num_layers)(make_batch(), LENGTHS)
    half = HIDDEN // 2
    top_h = out.final[0][-1]  # (batch, hidden)
    for b, n in enumerate(LENGTHS.tolist()):
        assert torch.equal(top_h[b, :half], out.states[b, n - 1, :half])
        assert torch.equal(top_h[b, half:], out.states[b, 0, half:])


def test_bidirectional_encoder_needs_even_hidden_size() -> None:
    with pytest.raises(ValueError, match="even hidden_size"):
        RNNEncoder(vocab_size=VOCAB, embed_size=EMBED, hidden_size=7, bidirectional=True)
    RNNEncoder(vocab_size=VOCAB, embed_size=EMBED, hidden_size=7, bidirectional=False)  # fine one-way


def test_encoder_output_repeat_gives_each_source_rows_in_a_row_and_select_keeps_whole_sources() -> None:
    out = make_encoder("lstm", True, 2)(make_batch(), LENGTHS)
    out = out.with_keys(torch.randn(len(LENGTHS), SRC_LEN, 3, dtype=torch.float64))
    rep = out.repeat(3)
    order = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3])
    assert rep.group == 3  # three decoder rows per source, the source itself stored once
    assert rep.states is out.states and rep.mask is out.mask and rep.keys is out.keys
    for r, o in zip(rep.final, out.final, strict=True):
        assert torch.equal(r, o[:, order])
    assert EncoderOutput(out.states, out.final, out.mask).repeat(2).keys is None
    # dropping source 1 keeps sources 0, 2, 3 and their rows
    kept = rep.select(torch.tensor([0, 2, 3]))
    assert kept.group == 3 and torch.equal(kept.states, out.states[[0, 2, 3]])
    assert torch.equal(kept.mask, out.mask[[0, 2, 3]]) and torch.equal(kept.keys, out.keys[[0, 2, 3]])
    for k, o in zip(kept.final, out.final, strict=True):
        assert torch.equal(k, o[:, [0, 0, 0, 2, 2, 2, 3, 3, 3]])


# --- Bridge ---------------------------------------------------------------------------------------

def fake_final(num_tensors: int, layers: int, batch: int, hidden: int) -> tuple[torch.Tensor, ...]:
    return tuple(torch.randn(layers, batch, hidden) for _ in range(num_tensors))


@pytest.mark.parametrize("num_tensors", [1, 2], ids=["gru", "lstm"])
def test_bridge_copy_passes_the_top_encoder_layers_unchanged(num_tensors: int) -> None:
    final = fake_final(num_tensors, layers=3, batch=4, hidden=8)
    bridge = Bridge("copy", enc_hidden=8, enc_layers=3, dec_hidden=8, dec_layers=2, num_tensors=num_tensors)
    state = bridge(final)
    assert len(state) == num_tensors
    for s, f in zip(state, final, strict=True):
        assert s.shape == (2, 4, 8)
        assert torch.equal(s, f[1:])  # the top two of three layers


@pytest.mark.parametrize("num_tensors", [1, 2], ids=["gru", "lstm"])
def test_bridge_linear_maps_the_top_layer_to_every_decoder_layer(num_tensors: int) -> None:
    final = fake_final(num_tensors, layers=2, batch=4, hidden=8)
    bridge = Bridge("linear", enc_hidden=8, enc_layers=2, dec_hidden=6, dec_layers=3, num_tensors=num_tensors)
    state = bridge(final)
    assert len(state) == num_tensors
    for s, f, proj in zip(state, final, bridge.proj, strict=True):
        assert s.shape == (3, 4, 6)
        expected = torch.tanh(proj(f[-1]))  # Bahdanau A.2.2: s_0 = tanh(W_s h)
        for layer in range(3):
            torch.testing.assert_close(s[layer], expected)


@pytest.mark.parametrize("num_tensors", [1, 2], ids=["gru", "lstm"])
def test_bridge_zeros_passes_nothing(num_tensors: int) -> None:
    final = fake_final(num_tensors, layers=1, batch=4, hidden=8)
    bridge = Bridge("zeros", enc_hidden=8, enc_layers=1, dec_hidden=5, dec_layers=2, num_tensors=num_tensors)
    state = bridge(final)
    assert len(state) == num_tensors
    for s in state:
        assert torch.equal(s, torch.zeros(2, 4, 5))
    assert list(bridge.parameters()) == []


@pytest.mark.parametrize("enc_hidden,enc_layers,dec_hidden,dec_layers", [(8, 2, 6, 2), (8, 1, 8, 2)],
                         ids=["hidden_mismatch", "too_few_encoder_layers"])
def test_bridge_copy_refuses_mismatched_sizes_and_suggests_linear(enc_hidden: int, enc_layers: int,
                                                                  dec_hidden: int, dec_layers: int) -> None:
    with pytest.raises(ValueError, match="bridge 'copy'.*use 'linear'"):
        Bridge("copy", enc_hidden=enc_hidden, enc_layers=enc_layers, dec_hidden=dec_hidden,
               dec_layers=dec_layers, num_tensors=2)
