"""The speed tricks change no result: batching, padding and length-sorting at translation time,
length-bucketing at training time, and the fused attention kernel in the whole model.

What is already pinned elsewhere is not repeated here:
- one sentence alone vs. in a padded batch, at the level of `search` (tests/search/test_search.py), the
  decoder (tests/nn/test_decoder.py) and the encoder (tests/nn/test_encoder.py);
- the fused SDPA context vs. the explicit one for a single attention call, with gradients
  (tests/nn/test_attention.py);
- the vectorised beam vs. a reference loop (tests/search/test_search.py).
Here: the same truths end to end, through `heed.api.Translator` (which sorts by length, pads,
batches and puts results back in input order), through `token_batches` + the training loss
(targets padded too), and through the whole model's forward and backward with the fused path.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from heed.api import Translator
from heed.config import config_from_dict
from heed.data.batching import collate, sentence_batches, token_batches
from heed.data.codec import Codec
from heed.data.corpus import Pair
from heed.data.vocab import PAD
from heed.nn.build import ModelConfig, build_model
from heed.nn.rnn import attention as attention_module

PAIRS = [  # sources and targets of many lengths, so both sides get padded
    Pair("3 mars 1998", "1998-03-03"),
    Pair("le 14 juillet 1789", "14 July 1789"),
    Pair("5/6/2001", "2001-05-06, a Sunday"),
    Pair("29 février 2000", "2000-02-29"),
    Pair("1er janvier 1900", "1 Jan"),
    Pair("december 31, 1999", "1999-12-31"),
    Pair("7 may 2020", "7.5.20"),
    Pair("2020년 5월 7일", "2020-05-07 (Thursday)"),
]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: one thread avoids synchronisation costs on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_model(codec: Codec, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    cfg = ModelConfig(**{"embed_size": 8, "hidden_size": 12, "dropout": 0.0, **overrides})
    return build_model(cfg, src_vocab_size=len(codec.src_vocab), tgt_vocab_size=len(codec.tgt_vocab)).double()


def per_example_losses(model, batch) -> torch.Tensor:
    """Summed cross-entropy over each example's real target tokens: (batch,)."""
    logits = model(batch.src, batch.src_lengths, batch.tgt_in, need_attention=False).logits
    nll = F.cross_entropy(logits.transpose(1, 2), batch.tgt_out, ignore_index=PAD, reduction="none")  # (batch, tgt_len)
    return nll.sum(1)


@pytest.fixture(scope="module")
def translator() -> Translator:
    """A tiny model fitted for a few steps to PAIRS, so that its outputs end at different lengths
    (a random model runs every sentence to max_len, which would hide finished rows in a batch)."""
    config = config_from_dict({"data": {"task": "dates"}, "decode": {"max_len_a": 0.0, "max_len_b": 12}})
    codec = Codec.build(PAIRS, config.data)
    model = tiny_model(codec).float()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    batch = collate(codec.encode_pairs(PAIRS), list(range(len(PAIRS))))
    for _ in range(40):
        optimizer.zero_grad()
        (per_example_losses(model, batch).sum() / batch.num_tgt_tokens).backward()
        optimizer.step()
    translator = Translator(model.double(), codec, config, device=torch.device("cpu"))
    lengths = {len(t.tokens) for t in translator.translate([p.src for p in PAIRS], beam=1)}
    assert len(lengths) > 2, lengths  # the premise: sentences finish at different steps
    return translator


def assert_same_translation(got, want) -> None:
    assert got.tokens == want.tokens and got.text == want.text and got.src_tokens == want.src_tokens
    assert got.score == pytest.approx(want.score, rel=1e-5, abs=1e-5)
    assert got.attention.shape == want.attention.shape
    assert abs(got.attention - want.attention).max() < 1e-5


# ------------------------------------------------------------------------------- translation


@pytest.mark.parametrize("beam", [1, 3])
def test_translating_alone_or_in_sorted_padded_batches_gives_the_same_output(translator: Translator,
                                                                            beam: int) -> None:
    texts = [p.src for p in PAIRS]
    alone = [translator.translate([t], beam=beam, batch_size=1)[0] for t in texts]
    for batch_size in (3, len(texts)):  # several padded batches; one batch holding every length
        together = translator.translate(texts, beam=beam, batch_size=batch_size)
        for got, want in zip(together, alone, strict=True):
            assert_same_translation(got, want)


def test_input_order_does_not_change_any_sentence_output(translator: Translator) -> None:
    texts = [p.src for p in PAIRS]
    forward = translator.translate(texts, beam=2, batch_size=4)
    backward = translator.translate(texts[::-1], beam=2, batch_size=4)[::-1]
    for got, want in zip(backward, forward, strict=True):
        assert_same_translation(got, want)


def test_inference_batches_are_sorted_longest_first_and_cover_every_sentence_once() -> None:
    src_ids = [[5] * n for n in (3, 9, 1, 9, 4, 6, 2)]
    batches = sentence_batches(src_ids, batch_size=3)
    lengths = [n for b in batches for n in b.src_lengths.tolist()]
    assert lengths == sorted(lengths, reverse=True)  # what pack_padded_sequence likes
    assert sorted(i for b in batches for i in b.indices.tolist()) == list(range(len(src_ids)))


# ---------------------------------------------------------------------------------- training


@pytest.fixture(scope="module")
def examples_and_codec():
    config = config_from_dict({"data": {"task": "dates"}})
    codec = Codec.build(PAIRS, config.data)
    return codec.encode_pairs(PAIRS), codec


def test_training_loss_of_each_example_is_the_same_alone_bucketed_or_padded(examples_and_codec) -> None:
    examples, codec = examples_and_codec
    model = tiny_model(codec).eval()
    with torch.no_grad():
        alone = torch.cat([per_example_losses(model, collate([e], [i])) for i, e in enumerate(examples)])
        for batches in (
            token_batches(examples, batch_tokens=60, shuffle=True, seed=3),  # several length buckets
            token_batches(examples, batch_tokens=10**6, shuffle=False),  # one batch, every length padded
        ):
            got = torch.full_like(alone, float("nan"))
            for batch in batches:
                got[batch.indices] = per_example_losses(model, batch)
            torch.testing.assert_close(got, alone, rtol=0, atol=1e-10)


def test_summed_training_gradient_does_not_depend_on_the_bucketing(examples_and_codec) -> None:
    examples, codec = examples_and_codec
    model = tiny_model(codec).train()  # dropout is 0, so train mode is deterministic

    def summed_gradient(batches) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        for batch in batches:
            per_example_losses(model, batch).sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    one_by_one = summed_gradient([collate([e], [i]) for i, e in enumerate(examples)])
    bucketed = summed_gradient(token_batches(examples, batch_tokens=60, shuffle=True, seed=5))
    for got, want in zip(bucketed, one_by_one, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


# ------------------------------------------------------------------------------ fused kernel


@pytest.mark.parametrize("score", ["general", "dot", "scaled_dot"])
def test_whole_model_loss_and_gradients_equal_with_fused_or_explicit_attention(examples_and_codec, monkeypatch,
                                                                              score: str) -> None:
    """On the CPU the model takes the explicit path (the fused kernel is CUDA-only by default):
    force the fused one and compare the training loss and every parameter's gradient. Only the
    decoder without input feeding reaches the fused kernel: with input feeding, `step` asks for the
    weights at every step."""
    examples, codec = examples_and_codec
    batch = token_batches(examples, batch_tokens=10**6, shuffle=False)[0]  # every length, padded

    def loss_and_grads(fused: bool):
        model = tiny_model(codec, seed=1, attention=score, input_feeding=False).train()
        if fused:
            original = attention_module.Attention.context

            def always_fused(self, query, keys, values, mask=None, *, fused=None, coverage=None):
                calls.append(self.fusable)
                return original(self, query, keys, values, mask, fused=True, coverage=coverage)

            monkeypatch.setattr(attention_module.Attention, "context", always_fused)
        loss = per_example_losses(model, batch).sum()
        loss.backward()
        monkeypatch.undo()
        return loss.detach(), [p.grad for p in model.parameters()]

    calls: list[bool] = []
    explicit_loss, explicit_grads = loss_and_grads(fused=False)
    fused_loss, fused_grads = loss_and_grads(fused=True)
    assert calls and all(calls)  # the fused kernel really ran
    torch.testing.assert_close(fused_loss, explicit_loss, rtol=0, atol=1e-10)
    for f, e in zip(fused_grads, explicit_grads, strict=True):
        torch.testing.assert_close(f, e, rtol=0, atol=1e-10)


@pytest.mark.cpu_bf16
@pytest.mark.parametrize("model", [
    dict(decoder="luong", rnn="lstm", attention="general", input_feeding=True, encoder_layers=2, decoder_layers=2),
    dict(decoder="luong", rnn="gru", attention="cosine", input_feeding=False),
    dict(decoder="luong", rnn="lstm", attention="scaled_dot", input_feeding=False),
    dict(decoder="bahdanau", rnn="gru", attention="additive"),
    dict(decoder="bahdanau", rnn="lstm", attention="dot"),
    dict(decoder="plain", rnn="lstm"),
])
def test_every_architecture_decodes_in_bf16_close_to_float32(model) -> None:
    """bf16 weights under autocast (Translator(bf16=True)): search runs for every decoder, RNN and
    score, and the teacher-forced log-probabilities stay within bf16 rounding of float32's."""
    from heed.search import DecodeConfig, search

    torch.manual_seed(0)
    cfg = ModelConfig(embed_size=8, hidden_size=16, dropout=0.0, **model)
    fp32 = build_model(cfg, src_vocab_size=20, tgt_vocab_size=20).eval()
    bf16 = build_model(cfg, src_vocab_size=20, tgt_vocab_size=20).eval()
    bf16.load_state_dict(fp32.state_dict())
    bf16.to(torch.bfloat16)
    src = torch.tensor([[5, 6, 7, 8, 9, 2], [4, 11, 2, 0, 0, 0], [12, 2, 0, 0, 0, 0]])
    lengths, tgt_in = torch.tensor([6, 3, 2]), torch.tensor([[1, 5, 6, 7], [1, 8, 9, 0], [1, 4, 0, 0]])
    with torch.inference_mode():
        ref = fp32(src, lengths, tgt_in).logits.log_softmax(-1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = bf16(src, lengths, tgt_in).logits.float().log_softmax(-1)
            hyps = [search(bf16, src, lengths, DecodeConfig(beam_size=beam, max_len_b=5)) for beam in (1, 3)]
    assert (got - ref).abs().max() < 0.1
    for nbest in hyps:
        assert len(nbest) == 3 and all(h and all(0 <= t < 20 for t in h[0].tokens) for h in nbest)
        assert all(torch.isfinite(torch.tensor(h[0].log_prob)) for h in nbest)


@pytest.mark.parametrize("bf16,user_value,expected", [(False, None, "16"), (False, "99", "99"),
                                                     pytest.param(True, None, "unset", marks=pytest.mark.cpu_bf16)])
def test_float32_work_caps_the_onednn_primitive_cache_unless_the_user_set_it(word_run, bf16, user_value,
                                                                            expected) -> None:
    """The by-length encoder meets many shapes; float32 translators and trainers keep oneDNN's
    per-shape cache small, bf16 ones keep its default (re-creating bf16 primitives costs)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    if user_value is not None:
        env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = user_value
    code = (f"import os, heed; assert 'ONEDNN_PRIMITIVE_CACHE_CAPACITY' not in os.environ or {user_value!r}; "
            f"heed.load({str(word_run)!r}, device='cpu', bf16={bf16}); "
            "print(os.environ.get('ONEDNN_PRIMITIVE_CACHE_CAPACITY', 'unset'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == expected
