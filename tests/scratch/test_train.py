"""Training the NumPy model: the loss falls on a tiny dates set; batching covers every row once."""
from __future__ import annotations

import datetime as dt
import random
from typing import NamedTuple

import numpy as np
import pytest

from heed.scratch.train import batch_rows, char_vocab, encode, main, train


class FakePair(NamedTuple):
    src: str
    tgt: str


def fake_dates(n: int, seed: int) -> list[FakePair]:
    """A stand-in for heed.data.dates: a few English forms -> ISO."""
    rng = random.Random(seed)
    forms = ("%d %B %Y", "%m/%d/%Y", "%B %d, %Y", "%d.%m.%y", "%a %d %b %Y")
    pairs = []
    for _ in range(n):
        d = dt.date(1950, 1, 1) + dt.timedelta(days=rng.randrange(36500))
        pairs.append(FakePair(d.strftime(rng.choice(forms)), d.isoformat()))
    return pairs


def test_loss_falls_on_a_tiny_dates_set():
    logs: list[str] = []
    trained = train(fake_dates(512, 0), fake_dates(64, 1), epochs=4, batch_size=32, hidden=48, embed=8,
                    lr=1e-2, seed=0, log=logs.append, every=float("inf"))  # no within-epoch lines on a slow CPU
    losses = [r.loss for r in trained.history]
    assert len(losses) == 4 and all(np.isfinite(losses))
    assert losses[-1] < 0.6 * losses[0], losses
    assert all(0.0 <= r.exact_match <= 1.0 and r.seconds > 0 for r in trained.history)
    assert len(logs) == 5 and "held-out exact match" in logs[-1]


def test_encode_follows_heed_batching_layout():
    pairs = [FakePair("ab", "12"), FakePair("b", "2")]
    sv, tv = char_vocab([p.src for p in pairs]), char_vocab([p.tgt for p in pairs])
    data = encode(pairs, sv, tv)
    a, b, one, two = sv.encode(["a"])[0], sv.encode(["b"])[0], tv.encode(["1"])[0], tv.encode(["2"])[0]
    np.testing.assert_array_equal(data.src, [[a, b, 2], [b, 2, 0]])  # chars + EOS, padded
    np.testing.assert_array_equal(data.src_lengths, [3, 2])
    np.testing.assert_array_equal(data.tgt_in, [[1, one, two], [1, two, 0]])  # BOS + chars
    np.testing.assert_array_equal(data.tgt_out, [[one, two, 2], [two, 2, 0]])  # chars + EOS
    batch = data.batch(np.array([1]))
    assert batch.src.shape == (1, 2) and batch.tgt_in.shape == (1, 2)  # cropped to the row's own width


@pytest.mark.parametrize("shuffle", [True, False])
def test_batches_cover_every_row_once_with_similar_lengths(shuffle):
    lengths = np.random.default_rng(0).integers(1, 40, 1000)
    rng = np.random.default_rng(1) if shuffle else None
    batches = batch_rows(lengths, 32, rng, pool_batches=8)
    rows = np.concatenate(batches)
    assert sorted(rows.tolist()) == list(range(1000))
    assert max(len(b) for b in batches) == 32
    spread = np.mean([lengths[b].max() - lengths[b].min() for b in batches])
    assert spread < 10  # vs ~37 for random batches


def test_module_entry_point_trains_on_generated_dates(capsys):
    pytest.importorskip("heed.data.dates")
    main(["--epochs", "1", "--train-size", "200", "--eval-size", "20", "--hidden", "16", "--embed", "4",
          "--batch-size", "50"])
    out = capsys.readouterr().out
    assert "epoch   1" in out and "test exact match" in out
