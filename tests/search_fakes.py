"""Fakes and helpers shared by the search tests (tests/search/test_search.py, tests/search/test_search_modes.py).

Three kinds of model: tiny random seeded Seq2Seq models (luong / bahdanau / plain), a scripted
fake whose next-token probabilities are a table (so beams can be worked out by hand), and the
teacher-forced pass that scores any output exactly.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import torch
from torch import Tensor

from heed.nn.build import ModelConfig, build_model
from heed.nn.masks import lengths_to_mask
from heed.nn.rnn.decoder import DecoderStep
from heed.search import DecodeConfig, Hypothesis, beam_search, greedy_search

PAD, BOS, EOS, A, B, C, D = 0, 1, 2, 3, 4, 5, 6
DECODERS = ["luong", "bahdanau", "plain"]


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """These tensors are tiny: with several threads, synchronisation dominates (25 s instead of 3 s
    for test_search.py on a busy 2-core machine). Restored afterwards for the other test files.
    A test module uses it by importing it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------------------
# Models


# Every family and kind the contract suite (tests/nn/test_family_contract.py) runs over: the RNN
# decoders by name, and Transformers (pre-norm with sinusoidal positions, post-norm with learned ones).
TRANSFORMERS = {"transformer": {}, "transformer-post-learned": {"norm": "post", "positions": "learned",
                                                                "tie_embeddings": False}}
MODEL_KINDS = [*DECODERS, "bahdanau-coverage", *TRANSFORMERS]


def tiny_config(kind: str) -> ModelConfig:
    if kind in TRANSFORMERS:
        return ModelConfig(family="transformer", layers=2, d_model=16, heads=4, ff_size=24, dropout=0.0,
                           attention_dropout=0.0, **TRANSFORMERS[kind])
    if kind == "bahdanau-coverage":
        return ModelConfig(decoder="bahdanau", coverage=True, hidden_size=16, embed_size=8, dropout=0.0)
    return ModelConfig(decoder=kind, hidden_size=16, embed_size=8, dropout=0.0)


def tiny_model(decoder: str = "luong", *, tgt_vocab: int = 9, src_vocab: int = 10, seed: int = 0):
    """A tiny model of any kind in MODEL_KINDS (an RNN decoder's name, or a Transformer), in eval mode."""
    torch.manual_seed(seed)
    return build_model(tiny_config(decoder), src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab).eval()


def padded_batch(lengths: list[int], vocab: int = 10, seed: int = 1) -> tuple[Tensor, Tensor]:
    """src (batch, max(lengths)) with real ids 3..vocab-1 and PAD under padding; lengths (batch,)."""
    gen = torch.Generator().manual_seed(seed)
    lens = torch.tensor(lengths)
    src = torch.randint(3, vocab, (len(lengths), max(lengths)), generator=gen)
    return src.masked_fill(~lengths_to_mask(lens), PAD), lens


@dataclass
class FakeEnc:
    mask: Tensor  # bool (rows, src_len), True = real token; one row per decoder row
    group: int = 1  # decoder rows per source

    def repeat(self, times: int) -> FakeEnc:
        return FakeEnc(self.mask.repeat_interleave(times, dim=0), self.group * times)

    def select(self, sources: Tensor) -> FakeEnc:
        rows = (sources.unsqueeze(1) * self.group + torch.arange(self.group)).view(-1)
        return FakeEnc(self.mask.index_select(0, rows), self.group)


@dataclass
class PrefixState:
    """The fake's whole state is what it has been fed so far (BOS first)."""

    fed: Tensor  # (batch, t) long

    def select(self, indices: Tensor) -> PrefixState:
        return PrefixState(self.fed.index_select(0, indices))


Table = Callable[[tuple[int, ...]], dict[int, float]]


@dataclass
class ScriptedModel:
    """Implements the search protocol from tables: `probs(prefix)` gives p(next | prefix) and
    `attention(prefix)` the weights over the real source positions, where prefix is the tuple of
    tokens emitted so far (no BOS). Counts its steps."""

    probs: Table
    vocab: int = 7
    attention: Callable[[tuple[int, ...]], list[float]] | None = None
    pad_id: int = PAD
    bos_id: int = BOS
    eos_id: int = EOS
    unk_id: int = 3  # heed's <unk> (the id A stands for)
    steps: int = field(default=0, init=False)

    def encode(self, src: Tensor, src_lengths: Tensor) -> FakeEnc:
        return FakeEnc(lengths_to_mask(src_lengths, src.size(1)))

    def init_state(self, enc: FakeEnc) -> PrefixState:
        return PrefixState(torch.empty(enc.mask.size(0), 0, dtype=torch.long))

    def step(self, prev_tokens: Tensor, state: PrefixState, enc: FakeEnc) -> DecoderStep:
        self.steps += 1
        fed = torch.cat([state.fed, prev_tokens.unsqueeze(1)], dim=1)
        prefixes = [tuple(row[1:]) for row in fed.tolist()]
        probs = torch.zeros(len(prefixes), self.vocab)
        for i, prefix in enumerate(prefixes):
            for token, p in self.probs(prefix).items():
                probs[i, token] = p
        attn = None
        if self.attention is not None:
            attn = torch.zeros(enc.mask.shape)
            for i, prefix in enumerate(prefixes):
                weights = self.attention(prefix)
                attn[i, :len(weights)] = torch.tensor(weights)
        return DecoderStep(probs.log(), PrefixState(fed), attn)


def table(rows: dict[tuple[int, ...], dict[int, float]]) -> Table:
    """A lookup table; any prefix not listed ends the sentence (EOS with probability 1)."""
    return lambda prefix: rows.get(prefix, {EOS: 1.0})


def one_source(length: int = 2) -> tuple[Tensor, Tensor]:
    return torch.full((1, length), A), torch.tensor([length])


# Beam 2 on this table is worked out by hand in test_search.py
# (test_scripted_beam_gives_hand_computed_hypotheses) and, node by node, in test_search_modes.py.
HAND_TABLE = table({
    (): {A: 0.6, B: 0.4},
    (A,): {B: 0.5, EOS: 0.3, A: 0.2},
    (B,): {EOS: 0.9, A: 0.05, B: 0.05},
    (A, B): {EOS: 0.5, A: 0.3, B: 0.2},
    (A, A): {EOS: 0.6, A: 0.2, B: 0.2},
})


def loves_eos(prefix: tuple[int, ...]) -> dict[int, float]:
    return {EOS: 0.9, A: 0.06, B: 0.04}


# ---------------------------------------------------------------------------------------------
# Helpers


def teacher_forced(model, src: Tensor, src_len: int, outputs: list[list[int]]) -> tuple[Tensor, Tensor | None]:
    """log P(tokens + EOS | src) for each output (n,), and the attention (n, max_len + 1, src_len)."""
    n, longest = len(outputs), max(len(o) for o in outputs) + 1
    tgt_in = torch.full((n, longest), PAD)
    tgt_out = torch.full((n, longest), PAD)
    for i, out in enumerate(outputs):
        tgt_in[i, :len(out) + 1] = torch.tensor([BOS] + out)
        tgt_out[i, :len(out) + 1] = torch.tensor(out + [EOS])
    with torch.no_grad():
        result = model(src[:, :src_len].expand(n, -1), torch.full((n,), src_len), tgt_in)
    logp = torch.log_softmax(result.logits, dim=-1).gather(2, tgt_out.unsqueeze(2)).squeeze(2)
    return logp.masked_fill(tgt_out == PAD, 0.0).sum(1), result.attention


def repeats_ngram(tokens: list[int], n: int) -> bool:
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


def assert_beam_of_one_equals_greedy(model, src: Tensor, src_lengths: Tensor) -> None:
    """Beam search with a beam of 1 keeps greedy's path: the same tokens, score and attention
    weights. beam_search is called itself: `search` would hand beam_size 1 to greedy_search."""
    cfg = DecodeConfig(beam_size=1, max_len_a=0.0, max_len_b=6)
    with torch.no_grad():
        greedy = greedy_search(model, src, src_lengths, cfg)
        beam = beam_search(model, src, src_lengths, cfg)
    for g, (b,) in zip(greedy, beam, strict=True):
        assert b.tokens == g.tokens and b.score == pytest.approx(g.score, rel=1e-6)
        torch.testing.assert_close(b.attention, g.attention, rtol=0, atol=0)


def assert_same_hypotheses(got: list[Hypothesis], want: list[Hypothesis]) -> None:
    assert [h.tokens for h in got] == [h.tokens for h in want]
    for g, w in zip(got, want):
        assert g.score == pytest.approx(w.score, rel=1e-5, abs=1e-5)
        assert g.log_prob == pytest.approx(w.log_prob, rel=1e-5, abs=1e-5)
        if w.attention is None:
            assert g.attention is None
        else:
            torch.testing.assert_close(g.attention, w.attention, rtol=1e-4, atol=1e-5)
