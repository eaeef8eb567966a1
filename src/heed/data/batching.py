"""Batches of padded id tensors, grouped by length so little compute goes to padding.

An example is `(src_ids, tgt_ids)`: vocabulary ids without specials. `collate` adds them:

    src     = src_ids + [EOS]          the encoder sees an explicit end, and an empty source still
                                       has length 1 (no zero-length rows, no all-padding masks)
    tgt_in  = [BOS] + tgt_ids          decoder inputs (teacher forcing)
    tgt_out = tgt_ids + [EOS]          what the decoder must predict at each step

so src_len and tgt_len below count those specials. The ids of BOS, EOS and padding are the
vocabulary's `Specials` (heed's own: 1, 2 and 0; a pretrained model's may differ); masks are bool,
True = real token, and come from the lengths. Lengths for batching are these padded widths (len + 1).

Randomness comes only from `random.Random(seed * 1_000_003 + epoch)`: the same seed and epoch give
the same batches, another epoch gives another order, and the global RNG is never touched.
"""
from __future__ import annotations

import random
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

import numpy as np
import torch
from torch import Tensor
from typing_extensions import Self

from heed.data.vocab import HEED_SPECIALS, Specials

Example = tuple[list[int], list[int]]


def _pad(rows: Sequence[Sequence[int]], width: int, pad: int) -> Tensor:
    """Rows of ids -> long (len(rows), width), right-padded with `pad`."""
    return torch.tensor([list(r) + [pad] * (width - len(r)) for r in rows], dtype=torch.long)


def specials_of(model: Any) -> Specials:
    """The special ids a model reads and writes (its pad_id, bos_id and eos_id; a pretrained
    model's are its own), as batching needs them."""
    return Specials(pad=model.pad_id, bos=model.bos_id, eos=model.eos_id)


def _mask(lengths: Tensor, width: int) -> Tensor:
    """lengths (batch,) -> bool (batch, width), True = real position."""
    return torch.arange(width, device=lengths.device) < lengths.unsqueeze(1)


B = TypeVar("B", bound="_Tensors")


class _Tensors:
    """What both batch kinds share: moving all tensor fields together, and the source mask."""

    src: Tensor
    src_lengths: Tensor

    @property
    def size(self) -> int:
        """Number of sentences in the batch."""
        return self.src.size(0)

    @property
    def src_mask(self) -> Tensor:
        """bool (batch, src_len), True = real token."""
        return _mask(self.src_lengths, self.src.size(1))

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Self:
        """A copy with every tensor on `device`."""
        return replace(self, **{f.name: getattr(self, f.name).to(device, non_blocking=non_blocking) for f in fields(self)})  # type: ignore[type-var, arg-type]

    def pin_memory(self) -> Self:
        """A copy in page-locked memory, for `to("cuda", non_blocking=True)` (needs CUDA)."""
        return replace(self, **{f.name: getattr(self, f.name).pin_memory() for f in fields(self)})  # type: ignore[type-var, arg-type]


@dataclass
class Batch(_Tensors):
    """Sources and targets, for training and scoring.

    src          long (batch, src_len)   ids + EOS, right-padded with the padding id
    src_lengths  long (batch,)           real tokens per row (EOS included, so >= 1)
    tgt_in       long (batch, tgt_len)   BOS + ids, right-padded
    tgt_out      long (batch, tgt_len)   ids + EOS, right-padded
    tgt_lengths  long (batch,)           len(ids) + 1, the real positions of tgt_in and tgt_out
    indices      long (batch,)           position of each example in the caller's list
    """

    src: Tensor
    src_lengths: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    tgt_lengths: Tensor
    indices: Tensor

    @property
    def tgt_mask(self) -> Tensor:
        """bool (batch, tgt_len), True = real position of tgt_in / tgt_out."""
        return _mask(self.tgt_lengths, self.tgt_out.size(1))

    @property
    def num_tgt_tokens(self) -> int:
        """Non-padding tokens in tgt_out (EOS included): the loss's normalizer."""
        return int(self.tgt_lengths.sum())


@dataclass
class SourceBatch(_Tensors):
    """Sources only, for translation (`sentence_batches`).

    src          long (batch, src_len)   ids + EOS, right-padded with the padding id
    src_lengths  long (batch,)           >= 1
    indices      long (batch,)           position of each row in the caller's input list
    """

    src: Tensor
    src_lengths: Tensor
    indices: Tensor


def collate(examples: Sequence[Example], indices: Sequence[int], specials: Specials = HEED_SPECIALS) -> Batch:
    """Pad examples `(src_ids, tgt_ids)` (no specials) into a Batch; `indices` are their positions
    in the caller's list, kept in `Batch.indices`; `specials`: the vocabulary's (Codec.specials)."""
    if len(examples) != len(indices):
        raise ValueError(f"{len(examples)} examples but {len(indices)} indices")
    if not examples:
        raise ValueError("cannot collate an empty batch")
    pad, bos, eos = specials.pad, specials.bos, specials.eos
    srcs = [[*s, eos] for s, _ in examples]
    tgt_in = [[bos, *t] for _, t in examples]
    tgt_out = [[*t, eos] for _, t in examples]
    src_len = max(map(len, srcs))
    tgt_len = max(map(len, tgt_out))
    return Batch(
        src=_pad(srcs, src_len, pad),
        src_lengths=torch.tensor([len(s) for s in srcs], dtype=torch.long),
        tgt_in=_pad(tgt_in, tgt_len, pad),
        tgt_out=_pad(tgt_out, tgt_len, pad),
        tgt_lengths=torch.tensor([len(t) for t in tgt_out], dtype=torch.long),
        indices=torch.tensor(list(indices), dtype=torch.long),
    )


def _cuts(widths: Sequence[int], batch_tokens: int, max_sentences: int | None) -> list[int]:
    """Where to cut a run of examples with padded widths `widths` (in order) into batches: the
    positions where a new batch starts. Greedy: a batch grows while len(batch) * its widest width
    <= batch_tokens (and len(batch) <= max_sentences); an example over the budget on its own
    becomes a batch of one. A width is the longer of src + EOS and BOS + tgt."""
    cuts: list[int] = []
    size = widest = 0
    limit = len(widths) + 1 if max_sentences is None else max_sentences
    for k, width in enumerate(widths):  # plain comparisons, no max(): once per training pair per epoch
        if width < widest:  # noqa: PLR1730  # no max(): see the loop's comment
            width = widest
        if size and (size >= limit or (size + 1) * width > batch_tokens):
            cuts.append(k)
            size, width = 0, widths[k]
        size += 1
        widest = width
    return cuts


def epoch_rng(seed: int, epoch: int) -> random.Random:
    """The one source of batching randomness for (seed, epoch)."""
    return random.Random(seed * 1_000_003 + epoch)


def check_batching(*, batch_tokens: int, max_sentences: int | None, pool_size: int = 100) -> None:
    """ValueError for a batching setting out of range."""
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be >= 1, got {batch_tokens}")
    if max_sentences is not None and max_sentences < 1:
        raise ValueError(f"max_sentences must be >= 1 or None, got {max_sentences}")
    if pool_size < 1:
        raise ValueError(f"pool_size must be >= 1, got {pool_size}")


def plan_batches(
    src_lengths: Sequence[int] | np.ndarray,
    tgt_lengths: Sequence[int] | np.ndarray,
    *,
    batch_tokens: int,
    max_sentences: int | None,
    shuffle: bool,
    rng: random.Random,
    pool_size: int = 100,
) -> list[np.ndarray]:
    """`token_batches` on lengths alone: each batch as an integer array of example positions, in
    batch order.

    `src_lengths[i]`, `tgt_lengths[i]`: ids of example i, without specials. Draws from `rng` in a
    fixed sequence (the example shuffle, then the batch shuffle), so the same lengths and rng state
    give the same plan; a prepared corpus plans each window of its shards with it. NumPy arrays, not
    lists of Python ints: the lengths, plus 8 bytes an example while planning and 4 after, which is
    what a prepared corpus's window costs in training memory."""
    src, tgt = np.asarray(src_lengths), np.asarray(tgt_lengths)  # (n,) any integer dtype
    n = len(src)
    if n == 0:
        return []
    order_buffer = array("i" if n < 2**31 else "q", range(n))  # 4 bytes an example where that holds
    if shuffle:
        rng.shuffle(order_buffer)  # random.shuffle on a compact buffer: the same draws as on a list
    order = np.frombuffer(order_buffer, dtype=f"i{order_buffer.itemsize}")  # (n,)
    mean_width = (int(np.maximum(src, tgt).sum(dtype=np.int64)) + n) / n
    per_batch = max(1, int(batch_tokens // mean_width))
    if max_sentences is not None:
        per_batch = min(per_batch, max_sentences)
    pool = pool_size * per_batch
    groups: list[np.ndarray] = []
    for start in range(0, n, pool):  # keys and widths per pool: nothing else as long as the lengths
        chunk = order[start : start + pool]
        chunk_src, chunk_tgt = src[chunk].astype(np.int64), tgt[chunk].astype(np.int64)
        # sort on (src_len, tgt_len) as one int, stably (as sorted() is: ties keep the shuffled order)
        by_length = np.argsort((chunk_src << 32) + chunk_tgt, kind="stable")
        widths = np.maximum(chunk_src, chunk_tgt)[by_length] + 1  # padded width, the longer side + 1 special
        groups.extend(np.split(chunk[by_length], _cuts(widths.tolist(), batch_tokens, max_sentences)))
    if shuffle:
        rng.shuffle(groups)
    return groups


def token_batches(
    examples: Sequence[Example],
    *,
    batch_tokens: int,
    max_sentences: int | None = None,
    shuffle: bool,
    seed: int = 0,
    epoch: int = 0,
    pool_size: int = 100,
    specials: Specials = HEED_SPECIALS,
) -> list[Batch]:
    """Token-bucketed training batches, each costing at most `batch_tokens` padded positions.

    1. shuffle the examples (if `shuffle`);
    2. in pools of about `pool_size` batches' worth of examples, sort by (src_len, tgt_len), so
       batches hold similar lengths but stay random across pools;
    3. cut batches so that sentences x (longest src or tgt in the batch, padded) <= batch_tokens
       and sentences <= max_sentences; a single example over the budget gets a batch of its own;
    4. shuffle the batch order (if `shuffle`).

    Every example lands in exactly one batch; `Batch.indices` points back into `examples`.
    """
    check_batching(batch_tokens=batch_tokens, max_sentences=max_sentences, pool_size=pool_size)
    groups = plan_batches([len(s) for s, _ in examples], [len(t) for _, t in examples], batch_tokens=batch_tokens,
                          max_sentences=max_sentences, shuffle=shuffle, rng=epoch_rng(seed, epoch),
                          pool_size=pool_size)
    batches = []
    for group in groups:
        positions = group.tolist()
        batches.append(collate([examples[i] for i in positions], positions, specials))
    return batches


def sentence_batches(src_ids: Sequence[list[int]], *, batch_size: int,
                     specials: Specials = HEED_SPECIALS) -> list[SourceBatch]:
    """Inference batches of at most `batch_size` sources, longest first, sorted by length inside
    each batch (descending, as `pack_padded_sequence` likes). Put outputs back in input order with
    `results[batch.indices[k]] = output[k]`."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = sorted(range(len(src_ids)), key=lambda i: -len(src_ids[i]))  # stable: ties keep input order
    batches = []
    for start in range(0, len(order), batch_size):
        group = order[start : start + batch_size]
        srcs = [[*src_ids[i], specials.eos] for i in group]
        batches.append(
            SourceBatch(
                src=_pad(srcs, max(map(len, srcs)), specials.pad),
                src_lengths=torch.tensor([len(s) for s in srcs], dtype=torch.long),
                indices=torch.tensor(group, dtype=torch.long),
            )
        )
    return batches


def padding_fraction(batches: Sequence[Batch | SourceBatch]) -> float:
    """Share of padded positions in src (and tgt_out, for Batches) over all batches: 0 = no waste."""
    total = real = 0
    for b in batches:
        total += b.src.numel()
        real += int(b.src_lengths.sum())
        if isinstance(b, Batch):
            total += b.tgt_out.numel()
            real += b.num_tgt_tokens
    return 1.0 - real / total if total else 0.0


def kept_indices(examples: Sequence[Example], *, max_src_len: int | None, max_tgt_len: int | None) -> list[int]:
    """Positions of the examples with len(src_ids) <= max_src_len and len(tgt_ids) <= max_tgt_len
    (lengths without specials; None means no limit), in order."""
    return [k for k, (s, t) in enumerate(examples)
            if (max_src_len is None or len(s) <= max_src_len) and (max_tgt_len is None or len(t) <= max_tgt_len)]


def filter_by_length(
    examples: Sequence[Example], *, max_src_len: int | None, max_tgt_len: int | None
) -> tuple[list[Example], int]:
    """(the examples `kept_indices` keeps, number dropped)."""
    kept = [examples[k] for k in kept_indices(examples, max_src_len=max_src_len, max_tgt_len=max_tgt_len)]
    return kept, len(examples) - len(kept)
